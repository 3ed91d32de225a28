"""C toolchains: how a target's generated C becomes a binary.

Object files are cached by the hash of compiler, flags and source text, so a
rebuild with unchanged kernels (e.g. the same model with other weights) costs
no compiler time. Translation units compile in parallel.

Cache entries carry a SHA-256 sidecar and are written atomically
(`tessera.util.digest`): a truncated, emptied or corrupted object is
compiled again, never linked. Output is reproducible: every unit compiles
in its own folder under its own file name, so no temporary path reaches a
symbol name, and debug info (with -g) sees `./NAME.c`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompileError
from ..util.atomic import atomic_writer
from ..util.digest import cache_entry_writer, intact, sha256_bytes
from ..util.progress import C_COMPILATION, Step, batch, report


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
    cacheable: bool = True  # False when the text does not capture all inputs (e.g. .incbin of a file outside it)
    # files the unit's assembly embeds with .incbin "NAME": (NAME, content), written beside the
    # source and found through -Wa,-I; part of the cache key, so the unit's path never matters
    assets: tuple[tuple[str, bytes], ...] = ()


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

    def object_key(self, src: SourceFile, flags: Sequence[str]) -> str:
        """The cache key of `src` compiled with `flags`: everything the object depends on."""
        assets = [f"{name}:{sha256_bytes(data)}" for name, data in src.assets]
        return hashlib.sha256(
            "\0".join([self.cc, *flags, _digest_tree(self.include_dirs), src.text, *assets]).encode()
        ).hexdigest()[:32]

    def compile_object(self, src: SourceFile, workdir: Path) -> Path:
        """The object file of `src`, from the cache or the compiler; the time is reported as a
        C_COMPILATION step (`tessera.util.progress`)."""
        start = time.perf_counter()
        obj, cached = self._object(src, workdir)
        report(Step(C_COMPILATION, src.name, time.perf_counter() - start, cached))
        return obj

    def _object(self, src: SourceFile, workdir: Path) -> tuple[Path, bool]:
        """(object file, whether the cache served it)."""
        flags = self.object_flags()
        key = self.object_key(src, flags)
        cached = cache_dir() / f"{key}.o"
        if src.cacheable and intact(cached):
            return cached, True
        # A folder per unit: units of different modules may share a file name, and the
        # object's file symbol is the bare name (no random prefix), for reproducible output.
        unit_dir = Path(tempfile.mkdtemp(prefix=f"{key[:8]}-", dir=workdir))
        c_path = unit_dir / src.name
        c_path.write_text(src.text)
        for name, data in src.assets:
            (unit_dir / name).write_bytes(data)
        located = [f"-ffile-prefix-map={unit_dir}=.", *([f"-Wa,-I{unit_dir}"] if src.assets else [])]
        if not src.cacheable:
            obj = c_path.with_suffix(".o")
            self._run_compiler(src, [*flags, *located], c_path, obj)
            return obj, False
        # atomic, sealed with a checksum: parallel builds may race on the entry, and a damaged one is rebuilt
        with cache_entry_writer(cached) as staged:
            self._run_compiler(src, [*flags, *located], c_path, staged)
        return cached, False

    def _run_compiler(self, src: SourceFile, flags: Sequence[str], c_path: Path, obj: Path) -> None:
        cmd = [self.cc, *flags, "-c", str(c_path), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(
                f"{self.cc} failed on {src.name} (exit {proc.returncode}):\n{proc.stderr.strip()}\n"
                f"command: {' '.join(cmd)}"
            )

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
    with tempfile.TemporaryDirectory(prefix="tessera-build-") as tmp, atomic_writer(output) as staged:
        workdir = Path(tmp)
        workers = max(1, min(jobs or os.cpu_count() or 1, len(units)))
        # longest unit first, so that no large unit starts last while the other cores idle; the link
        # order stays the units' own
        longest_first = sorted(range(len(units)), key=lambda k: (-len(units[k][1].text), k))
        with batch(C_COMPILATION, len(units)), ThreadPoolExecutor(max_workers=workers) as pool:
            built = dict(zip(longest_first, pool.map(lambda k: units[k][0].compile_object(units[k][1], workdir),
                                                     longest_first)))
        objects = [built[k] for k in range(len(units))]
        cmd = [linker.cc, *(["-shared"] if shared else []), "-o", str(staged), *map(str, objects), *ldflags]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"linking {output.name} failed:\n{proc.stderr.strip()}\ncommand: {' '.join(cmd)}")
    return output
