"""Runtime modules: generated sources, and how they become a loaded shared library."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..target.toolchain import SourceFile, Toolchain, link_shared_library
from .shared_library import SharedLibrary


@dataclass
class CSourceModule:
    """C translation units for one target, plus the toolchain that builds them."""

    sources: list[SourceFile]
    function_names: list[str]
    toolchain: Toolchain
    extra_sources: list[Path] = field(default_factory=list)  # e.g. CRT sources
    imports: list["CSourceModule"] = field(default_factory=list)
    # the functions each generated translation unit defines, by file name (for per-unit compiler times)
    unit_functions: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def functions_by_unit(self) -> dict[str, tuple[str, ...]]:
        """`unit_functions` of this module and its imports."""
        found = dict(self.unit_functions)
        for imp in self.imports:
            found.update(imp.functions_by_unit())
        return found

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


def build_and_load(module: CSourceModule) -> SharedLibrary:
    tmp = tempfile.TemporaryDirectory(prefix="tessera-lib-")
    path = module.build(Path(tmp.name) / "kernels.so")
    return SharedLibrary(path, tmp)


def default_jobs() -> int:
    return os.cpu_count() or 1
