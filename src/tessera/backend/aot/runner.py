"""Compile a Model Library Format folder with a test main and run it.

Works the same for a fresh `AotLibrary` and for a tarball read back from
disk: both describe their inputs and outputs with a `Signature`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...codegen.names import is_c_identifier
from ...crt.status import describe
from ...errors import CompileError, KernelFailure, RuntimeExecutionError, TesseraError
from ...relay.ty import TensorType
from ...target.toolchain import SourceFile, Toolchain, cache_dir, link_shared_library
from ...util.atomic import TEMP_PREFIX, atomic_directory
from .harness import main_source, parse_outputs
from .mlf_archive import unpack

if TYPE_CHECKING:  # loaded only for a board run
    from ...micro.boards import Board
    from ...micro.build import ElfImage, SectionSizes
    from ...micro.qemu import QemuResult


@dataclass(frozen=True)
class TensorSig:
    name: str
    type: TensorType

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


@dataclass(frozen=True)
class Signature:
    name: str
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    kernel_statuses: tuple[tuple[str, tuple[int, ...]], ...] = ()  # kernel -> the error statuses it may return

    @classmethod
    def from_metadata(cls, meta: dict) -> "Signature":
        def tensors(items: list[dict]) -> tuple[TensorSig, ...]:
            return tuple(TensorSig(t["name"], TensorType(tuple(t["shape"]), t["dtype"])) for t in items)

        name = meta["model_name"]
        if not is_c_identifier(name):  # it is spliced into the test main's C
            raise TesseraError(f"metadata.json: model_name {name!r} is not a C identifier (letters, digits, "
                               "underscore), as tessera writes it")
        statuses = tuple((k["name"], tuple(k.get("error_statuses", ()))) for k in meta.get("kernels", ()))
        return cls(name, tensors(meta["inputs"]), tensors(meta["outputs"]), statuses)

    def failure(self, status: int) -> KernelFailure:
        """The error for a run that returned `status`, naming the kernels that can return it."""
        kernels = [k for k, codes in self.kernel_statuses if status in codes]
        where = ""
        if len(kernels) == 1:
            where = f" in kernel {kernels[0]}"
        elif kernels:
            where = f" in one of kernels {', '.join(kernels)}"
        return KernelFailure(f"model {self.name}: {describe(status)}{where}", ",".join(kernels), status)

    def check_status(self, stdout: str) -> None:
        """Raise the run's failure when the test program reported a non-zero status."""
        for line in stdout.splitlines():
            if line.startswith("TSERROR "):
                raise self.failure(int(line.split()[1]))

    def check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        if len(inputs) != len(self.inputs):
            raise RuntimeExecutionError(f"model {self.name} takes {len(self.inputs)} inputs, got {len(inputs)}")
        for t, a in zip(self.inputs, inputs):
            if tuple(np.shape(a)) != t.type.shape:
                raise RuntimeExecutionError(f"input {t.name!r}: got shape {np.shape(a)}, expected {t.type.shape}")


@dataclass
class BoardRun:
    board: str
    sizes: SectionSizes
    qemu: QemuResult
    seconds: float
    inference_instructions: int | None = None  # one run of the model, start-up and printing excluded


def _content_digest(folder: Path) -> tuple[str, list[Path]]:
    """SHA-256 over the relative paths and contents of a folder's files (a test main excluded)."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "main.c")
    for p in files:
        h.update(str(p.relative_to(folder)).encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest(), files


def stable_copy(folder: Path) -> Path:
    """The same files under a path that depends only on their contents.

    Include paths are part of the compiler flags, and flags are part of the
    object cache key: a content-addressed folder lets a rebuild of the same
    model (another run, another board) reuse every compiled kernel. The
    folder is made atomically, and one whose content no longer matches its
    name (damaged, half-deleted) is replaced, not used.
    """
    digest, files = _content_digest(folder)
    stable = cache_dir().parent / "projects" / digest[:24]
    if stable.is_dir() and _content_digest(stable)[0] == digest:
        return stable
    if stable.exists():
        _discard(stable)
    with atomic_directory(stable, exist_ok=True) as staged:
        for p in files:
            dst = staged / p.relative_to(folder)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dst)
    return stable


def _discard(path: Path) -> None:
    """Move a damaged cache folder out of the way (atomically), then delete it."""
    aside = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}damaged-", dir=path.parent))
    try:
        os.rename(path, aside / path.name)
    except OSError:
        pass  # another process replaced it first
    shutil.rmtree(aside, ignore_errors=True)


def _units(folder: Path, main: Path) -> list[SourceFile]:
    """The model's C files and the test main, as cacheable translation units."""
    files = [*model_sources(folder), main]
    return [SourceFile(p.name, p.read_text(), cacheable="incbin" not in p.read_text()) for p in files]


def include_flags(folder: Path) -> list[str]:
    return [f"-I{folder / 'codegen/host/include'}", f"-I{folder / 'runtime/include'}",
            f"-Wa,-I{folder / 'codegen/host/src'}"]


def model_sources(folder: Path) -> list[Path]:
    """Every piece's generated C (codegen/<piece>/src) and the runtime's."""
    return [*sorted((folder / "codegen").glob("*/src/*.c")), *sorted((folder / "runtime/src").glob("*.c"))]


def run_on_host(folder: Path, sig: Signature, inputs: Sequence[np.ndarray], toolchain: Toolchain) -> list[np.ndarray]:
    sig.check_inputs(inputs)
    meta = json.loads((folder / "metadata.json").read_text()) if (folder / "metadata.json").is_file() else {}
    toolchain = replace(toolchain, ldflags=tuple(meta.get("toolchain", {}).get("link_flags", toolchain.ldflags)))
    folder = stable_copy(folder)
    with tempfile.TemporaryDirectory(prefix="tessera-host-") as tmp:
        main = Path(tmp) / "main.c"
        main.write_text(main_source(sig, inputs))
        tc = replace(toolchain, cflags=(*toolchain.cflags, *include_flags(folder)), pic=False)
        exe = link_shared_library([(tc, u) for u in _units(folder, main)], Path(tmp) / "model", tc, shared=False)
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    sig.check_status(run.stdout)
    if run.returncode != 0:
        raise RuntimeExecutionError(f"AOT model {sig.name} exited with {run.returncode}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return parse_outputs(sig, run.stdout)


def check_fits(metadata: dict[str, Any], board: Board) -> None:
    """Fail before compiling when weights or pools cannot fit the board's memories."""
    pools = sum(p["size_bytes"] for p in metadata.get("pools", ()))
    needs = (("weights", metadata.get("params_bytes", 0), board.weights_region),
             ("pools (intermediates + workspace)", pools, board.arena))
    for what, size, region in needs:
        if size > region.length:
            raise CompileError(
                f"model {metadata['model_name']} does not fit {board.name}: its {what} need {size} bytes, "
                f"the board's {region} has {region.length}"
            )


def run_on_board(folder: Path, sig: Signature, board: str, inputs: Sequence[np.ndarray],
                 count_instructions: bool = False, timeout: float = 600) -> tuple[list[np.ndarray], BoardRun]:
    """Build for an emulated Cortex-M board and run under QEMU.

    Pools and the test's buffers go to the board's large RAM (`.arena`);
    weights stay in the code region (flash).
    """
    from ...micro.boards import get_board
    from ...micro.build import build_elf, size
    from ...micro.qemu import run as qemu_run

    spec = get_board(board)
    sig.check_inputs(inputs)
    meta = folder / "metadata.json"
    if meta.is_file():
        check_fits(json.loads(meta.read_text()), spec)
    folder = stable_copy(folder)
    work = Path(tempfile.mkdtemp(prefix="tessera-board-"))
    arena = '__attribute__((section(".arena")))'
    main = work / "main.c"
    main.write_text(main_source(sig, inputs, arena))
    start = time.perf_counter()
    flags = [*include_flags(folder), f"-DTSGEN_{sig.name.upper()}_POOL_ATTRIBUTE={arena}"]
    units = _units(folder, main)

    def build_and_run(repeat: int) -> tuple[ElfImage, QemuResult]:
        # TS_REPEAT only changes main.c, but flags key the cache: pass it in the source instead
        unit = [SourceFile(u.name, f"#define TS_REPEAT {repeat}\n{u.text}") if u.name == "main.c" else u
                for u in units]
        elf = build_elf(spec, unit, [], work / f"build{repeat}", extra_cflags=flags)
        result = qemu_run(spec, elf, timeout=timeout, count_instructions=count_instructions)
        sig.check_status(result.stdout)
        if result.exit_code != 0:
            raise RuntimeExecutionError(f"AOT model {sig.name} on {board} exited with {result.exit_code}:\n"
                                        f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
        return elf, result

    elf, result = build_and_run(1)
    per_inference = None
    if count_instructions:
        # the same program running the model twice: the difference is exactly one inference
        _, twice = build_and_run(2)
        if twice.instructions is None or result.instructions is None:
            raise RuntimeExecutionError(f"AOT model {sig.name} on {board}: QEMU printed no instruction count")
        per_inference = twice.instructions - result.instructions
    run = BoardRun(board, size(elf), result, time.perf_counter() - start, per_inference)
    shutil.rmtree(work, ignore_errors=True)
    return parse_outputs(sig, result.stdout), run


class MlfModel:
    """A Model Library Format tarball (or folder), checked and unpacked for running."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self._tmp = tempfile.TemporaryDirectory(prefix="tessera-mlf-")
        self.folder = Path(self._tmp.name)
        self.metadata = unpack(path, self.folder)
        self.signature = Signature.from_metadata(self.metadata)

    @property
    def reference_model(self) -> Path | None:
        onnx_path = self.folder / "src" / "model.onnx"
        return onnx_path if onnx_path.is_file() else None
