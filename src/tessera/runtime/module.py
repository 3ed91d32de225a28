"""Runtime modules: generated sources, and the shared libraries they become."""

from __future__ import annotations

import ctypes
import os
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RuntimeExecutionError
from ..target.toolchain import SourceFile, Toolchain, link_shared_library


@dataclass
class CSourceModule:
    """C translation units for one target, plus the toolchain that builds them."""

    sources: list[SourceFile]
    function_names: list[str]
    toolchain: Toolchain
    extra_sources: list[Path] = field(default_factory=list)  # e.g. CRT sources
    imports: list["CSourceModule"] = field(default_factory=list)

    def units(self) -> list[tuple[Toolchain, SourceFile]]:
        """Every translation unit of this module and its imports, with its toolchain."""
        files = [(self.toolchain, s) for s in self.sources]
        files += [(self.toolchain, SourceFile(p.name, p.read_text())) for p in self.extra_sources]
        for imp in self.imports:
            files += imp.units()
        unique: dict[tuple[str, str], tuple[Toolchain, SourceFile]] = {}
        for tc, f in files:
            unique.setdefault((f.name, f.text), (tc, f))  # shared CRT files link once
        return list(unique.values())

    def build(self, output: Path, extra: Sequence[SourceFile] = ()) -> Path:
        units = self.units() + [(self.toolchain, s) for s in extra]
        return link_shared_library(units, output, self.toolchain)


class SharedLibrary:
    """A loaded shared object; `kernel(name)` returns a C function pointer."""

    def __init__(self, path: Path, owner_dir: tempfile.TemporaryDirectory | None = None) -> None:
        # An absolute path: given a bare name ("model.so"), dlopen would search the
        # system library path instead of the current folder, and could load a system library.
        self.path = Path(path).absolute()
        self._lib = ctypes.CDLL(str(self.path))
        self._owner = owner_dir
        if owner_dir is not None:
            weakref.finalize(self, owner_dir.cleanup)

    def kernel(self, name: str) -> ctypes._CFuncPtr:
        try:
            fn = getattr(self._lib, name)
        except AttributeError:
            raise RuntimeExecutionError(f"kernel {name!r} not found in {self.path.name}") from None
        fn.restype = ctypes.c_int32
        return fn

    def symbol_address(self, name: str) -> int:
        return ctypes.cast(getattr(self._lib, name), ctypes.c_void_p).value or 0

    def has_symbol(self, name: str) -> bool:
        return hasattr(self._lib, name)

    def check_cpu(self) -> None:
        """Refuse to run code built for instructions this CPU lacks (it would die of SIGILL)."""
        if not self.has_symbol("TSMissingCpuFeature"):
            return  # built before the check existed, or for a target without one
        probe = self._lib.TSMissingCpuFeature
        probe.restype = ctypes.c_char_p
        missing = probe()
        if missing:
            raise RuntimeExecutionError(
                f"{self.path.name} was compiled for CPUs with {missing.decode()}, which this CPU lacks; "
                "rebuild it for this machine (target `c`, i.e. -march=native) or a lower ISA level "
                "(e.g. `c -mcpu=x86-64-v3` for AVX2, `c -mcpu=x86-64-v2` for SSE4.2)"
            )


def build_and_load(module: CSourceModule) -> SharedLibrary:
    tmp = tempfile.TemporaryDirectory(prefix="tessera-lib-")
    path = module.build(Path(tmp.name) / "kernels.so")
    return SharedLibrary(path, tmp)


def default_jobs() -> int:
    return os.cpu_count() or 1
