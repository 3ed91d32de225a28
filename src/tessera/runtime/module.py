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
from ..target.toolchain import SourceFile, Toolchain


@dataclass
class CSourceModule:
    """C translation units for one target, plus the toolchain that builds them."""

    sources: list[SourceFile]
    function_names: list[str]
    toolchain: Toolchain
    extra_sources: list[Path] = field(default_factory=list)  # e.g. CRT sources
    imports: list["CSourceModule"] = field(default_factory=list)

    def all_sources(self) -> list[SourceFile]:
        files = list(self.sources)
        for path in self.extra_sources:
            files.append(SourceFile(path.name, path.read_text()))
        for imp in self.imports:
            files.extend(imp.all_sources())
        return files

    def build(self, output: Path, extra: Sequence[SourceFile] = ()) -> Path:
        return self.toolchain.build_shared_library([*self.all_sources(), *extra], output)


class SharedLibrary:
    """A loaded shared object; `kernel(name)` returns a C function pointer."""

    def __init__(self, path: Path, owner_dir: tempfile.TemporaryDirectory | None = None) -> None:
        self.path = Path(path)
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


def build_and_load(module: CSourceModule) -> SharedLibrary:
    tmp = tempfile.TemporaryDirectory(prefix="tessera-lib-")
    path = module.build(Path(tmp.name) / "kernels.so")
    return SharedLibrary(path, tmp)


def default_jobs() -> int:
    return os.cpu_count() or 1
