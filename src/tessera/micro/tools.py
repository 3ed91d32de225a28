"""Finding the external tools, with the Debian package to install if absent.

Building and running Cortex-M programs needs a cross compiler, newlib, and
QEMU; a missing one should say what to install, not fail with a bare
"No such file or directory" deep inside subprocess.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from ..errors import TesseraError

#: Executable or file -> Debian package that provides it.
PACKAGES: dict[str, str] = {
    "arm-none-eabi-gcc": "gcc-arm-none-eabi",
    "arm-none-eabi-size": "binutils-arm-none-eabi",
    "arm-none-eabi-nm": "binutils-arm-none-eabi",
    "rdimon.specs": "libnewlib-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
    "gcc": "gcc",
}


class MissingToolError(TesseraError):
    """A tool tessera needs is not installed."""


def install_hint(tool: str) -> str:
    package = PACKAGES.get(tool, tool)
    return f"install the Debian package {package!r} (apt-get install --no-install-recommends {package})"


def require_tool(tool: str) -> str:
    """The full path of executable `tool`, or MissingToolError naming its package."""
    path = shutil.which(tool)
    if path is None:
        raise MissingToolError(f"{tool!r} not found on PATH: {install_hint(tool)}")
    return path


@functools.cache
def require_newlib(cc: str = "arm-none-eabi-gcc") -> None:
    """Check that `cc` finds newlib's semihosting specs (librdimon)."""
    require_tool(cc)
    proc = subprocess.run([cc, "-print-file-name=rdimon.specs"], capture_output=True, text=True, check=False)
    found = proc.stdout.strip()
    if found in ("", "rdimon.specs"):  # gcc echoes the bare name when it finds nothing
        raise MissingToolError(f"{cc} cannot find newlib (rdimon.specs): {install_hint('rdimon.specs')}")
