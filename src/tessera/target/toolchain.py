"""C toolchains: how a target's generated C becomes a binary.

Object files are cached by the hash of compiler, flags and source text, so a
rebuild with unchanged kernels (e.g. the same model with other weights) costs
no compiler time. Translation units compile in parallel.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompileError


def cache_dir() -> Path:
    root = os.environ.get("TESSERA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tessera"
    )
    path = Path(root) / "objects"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _digest_tree(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for root in paths:
        for f in sorted(Path(root).rglob("*.h")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class SourceFile:
    """One translation unit: a file name and its text."""

    name: str
    text: str
    cacheable: bool = True  # False when the text does not capture all inputs (e.g. .incbin)


@dataclass(frozen=True)
class Toolchain:
    cc: str = "gcc"
    cflags: tuple[str, ...] = ("-O3", "-march=native", "-std=gnu11")
    warning_flags: tuple[str, ...] = ("-Wall",)
    ldflags: tuple[str, ...] = ("-lm",)
    include_dirs: tuple[Path, ...] = field(default_factory=tuple)
    runtime_sources: tuple[str, ...] = ()  # CRT files (tessera/crt/src) linked with the kernels
    pic: bool = True  # position-independent code for shared libraries (host only)

    @property
    def link_flags(self) -> tuple[str, ...]:
        """`ldflags`, plus the OpenMP runtime when the sources compile with -fopenmp."""
        if "-fopenmp" in self.cflags and "-fopenmp" not in self.ldflags:
            return (*self.ldflags, "-fopenmp")
        return self.ldflags

    @property
    def is_host(self) -> bool:
        """Can code from this toolchain run in this process?"""
        return self.pic

    def check_available(self) -> None:
        if shutil.which(self.cc) is None:
            raise CompileError(f"C compiler {self.cc!r} not found on PATH; install it or choose another target")

    def _werror(self) -> tuple[str, ...]:
        return ("-Werror",) if os.environ.get("TESSERA_WERROR") == "1" else ()

    def object_flags(self) -> list[str]:
        flags = [*self.cflags, *self.warning_flags, *self._werror()]
        if self.pic:
            flags += ["-fPIC", "-fvisibility=hidden"]
        return flags + [f"-I{d}" for d in self.include_dirs]

    def compile_object(self, src: SourceFile, workdir: Path) -> Path:
        flags = self.object_flags()
        key = hashlib.sha256(
            "\0".join([self.cc, *flags, _digest_tree(self.include_dirs), src.text]).encode()
        ).hexdigest()[:32]
        cached = cache_dir() / f"{key}.o"
        if src.cacheable and cached.exists():
            return cached
        # units of different modules may share a file name: keep them apart
        c_path = workdir / f"{key[:8]}_{src.name}"
        c_path.write_text(src.text)
        obj = c_path.with_suffix(".o")
        cmd = [self.cc, *flags, "-c", str(c_path), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(
                f"{self.cc} failed on {src.name} (exit {proc.returncode}):\n{proc.stderr.strip()}\n"
                f"command: {' '.join(cmd)}"
            )
        if not src.cacheable:
            return obj
        # Write the cache entry atomically: parallel builds may race on it.
        fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".o.tmp")
        os.close(fd)
        shutil.copyfile(obj, tmp)
        os.replace(tmp, cached)
        return cached

    def build_shared_library(
        self, sources: Sequence[SourceFile], output: Path, jobs: int | None = None
    ) -> Path:
        """Compile `sources` (in parallel) and link them into `output`."""
        return link_shared_library([(self, s) for s in sources], output, self, jobs)


def link_shared_library(units: Sequence[tuple[Toolchain, SourceFile]], output: Path, linker: Toolchain,
                        jobs: int | None = None, extra_ldflags: Sequence[str] = (), shared: bool = True) -> Path:
    """Compile each unit with its own toolchain (in parallel), link with `linker`.

    The link takes every toolchain's ldflags, so a library target's `-l`
    flags reach the final shared object (or executable, with shared=False).
    """
    for tc in {id(tc): tc for tc, _ in units}.values():
        tc.check_available()
    output = Path(output)
    ldflags: list[str] = []
    for tc, _ in units:
        ldflags += [f for f in tc.link_flags if f not in ldflags]
    ldflags += [f for f in extra_ldflags if f not in ldflags]
    with tempfile.TemporaryDirectory(prefix="tessera-build-") as tmp:
        workdir = Path(tmp)
        workers = max(1, min(jobs or os.cpu_count() or 1, len(units)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            objects = list(pool.map(lambda u: u[0].compile_object(u[1], workdir), units))
        linked = workdir / ("link.so" if shared else "link.exe")
        cmd = [linker.cc, *(["-shared"] if shared else []), "-o", str(linked), *map(str, objects), *ldflags]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"linking {output.name} failed:\n{proc.stderr.strip()}\ncommand: {' '.join(cmd)}")
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(linked, output)
        if not shared:
            output.chmod(0o755)
    return output
