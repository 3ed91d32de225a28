"""Compile and link C for a board into an ELF that QEMU can boot.

The kernels tessera generates for a Cortex-M target are plain C; to run
them they need start-up code, a linker script and the right multilib of
newlib. `build_elf` adds those (from `startup.py`), compiles every unit with
the flags of the board's tessera target (so tests exercise exactly the
flags the `c -mcpu=...` target uses) and links with semihosting. Object
files go through the tessera object cache (`Toolchain.compile_object`).

Memory that does not fit is the common failure for microcontrollers, so a
linker "region overflowed" message becomes a `CompileError` that names the
region and gives bytes needed vs. bytes available; `size` reports where the
bytes go.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from ..errors import CompileError
from ..target.toolchain import SourceFile, Toolchain
from ..util.progress import C_COMPILATION, batch
from .boards import Board, Region, get_board
from .startup import STACK_MIN, linker_script, startup_c
from .tools import require_newlib, require_tool

#: Flags added to the board toolchain's, for linking a bare-metal program.
LINK_FLAGS = ("--specs=rdimon.specs", "-nostartfiles", "-Wl,--gc-sections")
#: Warnings the start-up code is compiled with (it must be clean under them).
STARTUP_WARNINGS = ("-Wall", "-Wextra")

_OVERFLOW = re.compile(r"region [`']?(\w+)'? overflowed by (\d+) bytes?")


@dataclass(frozen=True)
class ElfImage:
    """A linked program for `board`; `map_file` is the linker map."""

    path: Path
    board: Board
    map_file: Path

    def sizes(self) -> SectionSizes:
        return size(self)


@dataclass(frozen=True)
class SectionSizes:
    """Bytes per output section of a linked ELF (`arm-none-eabi-size -A`).

    text: `.text` (vector table, code, libc and libgcc code).
    rodata: `.rodata` (constants, string literals, constructor tables), the
        model weights (`.weights`, in flash or the board's weights region) and
        the unwind tables `.ARM.extab`/`.ARM.exidx`.
    data: `.data`, initialised variables (in RAM, with a copy in flash).
    bss: `.bss`, zero-initialised variables (RAM).
    arena: `.arena`, NOLOAD buffers in the board's large RAM region.
    stack: the minimum stack reserved after `.bss` (not counted in `ram`).
    sections: every allocated section by name, including the above.
    """

    text: int
    rodata: int
    data: int
    bss: int
    arena: int
    stack: int
    sections: Mapping[str, int]

    @property
    def flash(self) -> int:
        """Bytes in the code region: text + rodata + data (the initial values)."""
        return self.text + self.rodata + self.data

    @property
    def ram(self) -> int:
        """Statically allocated RAM: data + bss + arena (no heap or stack)."""
        return self.data + self.bss + self.arena


def _as_units(
    sources: Iterable[SourceFile | str | os.PathLike[str]], tc: Toolchain
) -> list[tuple[Toolchain, SourceFile]]:
    units: list[tuple[Toolchain, SourceFile]] = []
    for src in sources:
        if isinstance(src, SourceFile):
            units.append((tc, src))
            continue
        path = Path(src)
        if not path.is_file():
            raise CompileError(f"source file {str(path)!r} does not exist")
        # Headers next to the file are not part of the cache key: don't cache.
        local = replace(tc, cflags=(*tc.cflags, "-iquote", str(path.parent.resolve())))
        units.append((local, SourceFile(path.name, path.read_text(), cacheable=False)))
    return units


def _region_error(board: Board, stderr: str, elf_name: str) -> CompileError | None:
    regions: dict[str, tuple[Region, str]] = {
        "FLASH": (board.flash, ".text + .rodata + .data initial values"),
        "RAM": (board.ram, f".data + .bss + {STACK_MIN} bytes minimum stack"),
        "ARENA": (board.arena, ".arena sections"),
    }
    if board.weights is not None:
        regions["WEIGHTS"] = (board.weights, "model weights")
    lines = []
    for name, over in dict(_OVERFLOW.findall(stderr)).items():
        region, holds = regions.get(name, (None, ""))
        if region is None:
            lines.append(f"region {name} overflowed by {over} bytes")
            continue
        lines.append(
            f"region {name} ({region}) overflowed by {over} bytes: the program needs "
            f"{region.length + int(over)} bytes ({holds}), the board has {region.length}"
        )
    if not lines and "tessera: less than the minimum stack" in stderr:
        lines.append(f"region RAM ({board.ram}): less than {STACK_MIN} bytes left for the stack after .bss")
    if not lines:
        return None
    hint = ""
    if any(line.startswith("region RAM") for line in lines):
        hint = '\nhint: put big buffers in the arena with __attribute__((section(".arena")))'
    return CompileError(f"{elf_name} does not fit on board {board.name}:\n  " + "\n  ".join(lines) + hint)


def build_elf(
    board: str | Board,
    sources: Sequence[SourceFile | str | os.PathLike[str]],
    include_dirs: Sequence[str | os.PathLike[str]],
    output_dir: str | os.PathLike[str],
    extra_cflags: Sequence[str] = (),
    *,
    name: str = "program",
) -> ElfImage:
    """Compile `sources` with the board's start-up code into `output_dir/name.elf`.

    Sources are `SourceFile`s (cached by content) or paths (compiled with
    their directory on the quote-include path). Flags: the board target's
    toolchain (`c_toolchain`), then `extra_cflags`, for every unit including
    the start-up code; link with `LINK_FLAGS`, the board's script and `-lm`.
    """
    b = get_board(board)
    base = b.toolchain()
    require_tool(base.cc)
    require_newlib(base.cc)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tc = replace(base, cflags=(*base.cflags, *extra_cflags))
    user_tc = replace(tc, include_dirs=(*tc.include_dirs, *(Path(d).resolve() for d in include_dirs)))
    units = [(replace(tc, warning_flags=STARTUP_WARNINGS), SourceFile("tessera_startup.c", startup_c(b)))]
    units += _as_units(sources, user_tc)
    script = out / f"{b.name}.ld"
    script.write_text(linker_script(b))
    workdir = out / "obj"
    workdir.mkdir(exist_ok=True)
    with batch(C_COMPILATION, len(units)), \
            ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, len(units)))) as pool:
        objects = list(pool.map(lambda u: u[0].compile_object(u[1], workdir), units))
    elf = out / f"{name}.elf"
    map_file = out / f"{name}.map"
    cmd = [tc.cc, *tc.cflags, *LINK_FLAGS, "-T", str(script), f"-Wl,-Map={map_file}",
           *map(str, objects), *tc.ldflags, "-o", str(elf)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        error = _region_error(b, proc.stderr, elf.name)
        if error is not None:
            raise error
        raise CompileError(f"linking {elf.name} for {b.name} failed:\n{proc.stderr.strip()}\ncommand: {' '.join(cmd)}")
    return ElfImage(elf, b, map_file)


def size(elf: ElfImage | str | os.PathLike[str]) -> SectionSizes:
    """Per-section sizes of a linked ELF; see `SectionSizes` for what counts where."""
    path = elf.path if isinstance(elf, ElfImage) else Path(elf)
    tool = require_tool("arm-none-eabi-size")
    proc = subprocess.run([tool, "-A", "-d", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CompileError(f"arm-none-eabi-size failed on {path}: {proc.stderr.strip()}")
    sections: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[1].isdigit():
            sections[parts[0]] = int(parts[1])
    allocated = {k: v for k, v in sections.items()
                 if not k.startswith((".debug", ".comment", ".ARM.attributes"))}
    get = allocated.get
    return SectionSizes(
        text=get(".text", 0),
        rodata=get(".rodata", 0) + get(".weights", 0) + get(".ARM.extab", 0) + get(".ARM.exidx", 0),
        data=get(".data", 0),
        bss=get(".bss", 0),
        arena=get(".arena", 0),
        stack=get(".stack", 0),
        sections=MappingProxyType(allocated),
    )


def symbol_range(elf: ElfImage | str | os.PathLike[str], symbol: str) -> tuple[int, int]:
    """[lo, hi) code addresses of function `symbol` (for counting its instructions)."""
    path = elf.path if isinstance(elf, ElfImage) else Path(elf)
    nm = require_tool("arm-none-eabi-nm")
    proc = subprocess.run([nm, "-S", str(path)], capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == symbol and parts[2] in "tTwW":
            lo = int(parts[0], 16) & ~1  # clear the Thumb bit
            return lo, lo + int(parts[1], 16)
    raise CompileError(f"function {symbol!r} not found (with a size) in {path.name}")
