"""Which executor goes with which file.

The graph executor's artefact is a shared library (`.so`); the AOT executor's
is Model Library Format, a `.tar` or a folder. `tessera compile` picks the
executor from the output's suffix when --executor is not given, and refuses
a suffix that names the other executor's format, so `-o model.tar` never
quietly holds a shared library nor `-o model.so` a folder of C.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TesseraError
from .model_files import MODEL_SUFFIXES, model_format

LIBRARY_SUFFIX = ".so"  # graph executor
TARBALL_SUFFIX = ".tar"  # AOT, Model Library Format

OUTPUT_RULE = ("model.so is a shared library for the graph executor, model.tar Model Library Format for the "
               "AOT executor; a folder (a path without suffix) needs --executor aot; a suffix that belongs to the "
               "other executor is refused")


def _output_kind(path: Path) -> str | None:
    if path.suffix == LIBRARY_SUFFIX:
        return "library"
    if path.suffix == TARBALL_SUFFIX:
        return "tarball"
    if path.is_dir() or (not path.suffix and not path.exists()):
        return "folder"
    return None


def executor_for_output(output: str, executor: str | None) -> str:
    """The executor `tessera compile -o output` builds for; refuses a mismatch with --executor."""
    kind = _output_kind(Path(output))
    if executor is None:
        if kind == "library":
            return "graph"
        if kind == "tarball":
            return "aot"
        raise TesseraError(
            f"-o {output}: cannot tell the executor from the name; name it model.so (graph executor) or "
            "model.tar (AOT executor, Model Library Format), or pass --executor aot to write a folder")
    if executor == "graph" and kind != "library":
        raise TesseraError(
            f"-o {output}: the graph executor writes a shared library, so the output must end in .so "
            "(a .tar or a folder is Model Library Format, written by --executor aot)")
    if executor == "aot" and kind not in ("tarball", "folder"):
        found = "a shared library name (.so is the graph executor's)" if kind == "library" else "neither"
        raise TesseraError(
            f"-o {output}: --executor aot writes Model Library Format, a .tar file or a folder (a path "
            f"without suffix); {output} is {found}")
    return executor


def module_kind(module: str) -> str:
    """What `tessera run MODULE` was given: "onnx" (a model file to compile: .onnx or .tflite), "mlf"
    (a .tar or a folder) or "library" (a .so)."""
    path = Path(module)
    if path.suffix in MODEL_SUFFIXES:
        kind, what = "onnx", f"{model_format(module).name} model"
    elif path.suffix == TARBALL_SUFFIX or path.is_dir():
        kind, what = "mlf", "Model Library Format tarball or folder"
    else:
        kind, what = "library", "library"
    if not path.exists():
        raise TesseraError(f"no such {what}: {module}")
    return kind


def executor_for_module(module: str, executor: str | None, board: str | None) -> str:
    """The executor `tessera run` uses; refuses one that cannot run the module."""
    kind = module_kind(module)
    if kind == "mlf":
        if executor == "graph":
            raise TesseraError(f"{module} is Model Library Format, which the AOT executor runs; "
                               "drop --executor graph")
        return "aot"
    if kind == "library":
        if executor == "aot" or board is not None:
            flag = f"--board {board}" if board is not None else "--executor aot"
            raise TesseraError(
                f"{flag}: {module} is a graph-executor library, which runs on the host only; for AOT "
                "compile with `tessera compile MODEL.onnx -o model.tar` and run the .tar (or run the .onnx)")
        return "graph"
    chosen = executor or ("aot" if board is not None else "graph")
    if board is not None and chosen != "aot":
        raise TesseraError("--board runs AOT-compiled C; use --executor aot (or drop --executor)")
    return chosen
