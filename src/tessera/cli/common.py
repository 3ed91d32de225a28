"""Helpers shared by the `tessera` subcommands."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

import numpy as np

from ..errors import TesseraError
from ..target.named import CompilationConfig
from ..target.target import Target
from .paths import readable_file

if TYPE_CHECKING:  # the compiler is imported when a subcommand compiles
    from ..backend.aot.library import AotLibrary
    from ..runtime.graph_library import GraphExecutorLibrary
    from ..transform.pass_infra import PassInstrument

Say = Callable[[str], None]  # prints a progress message


def progress(quiet: bool) -> Say:
    start = time.perf_counter()

    def say(message: str) -> None:
        if not quiet:
            print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    return say


def parse_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`name:1,3,224,224` -> {"name": (1, 3, 224, 224)}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        if not sep or not name:
            raise TesseraError(f"--input-shape {spec!r}: expected NAME:D1,D2,... e.g. image:1,3,224,224")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise TesseraError(f"--input-shape {spec!r}: dimensions must be integers >= 0") from None
        if any(d < 0 for d in shape):
            raise TesseraError(f"--input-shape {spec!r}: got {shape}, dimensions must be integers >= 0 "
                               "(give every dimension; -1 does not mean 'keep')")
        if name in shapes:
            raise TesseraError(f"--input-shape {spec!r}: input {name!r} is given twice")
        shapes[name] = shape
    return shapes


def model_name_for(path: str) -> str:
    """A C identifier from a model file name: `digits_cnn.onnx` -> `digits_cnn`."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", Path(path).stem) or "model"
    return stem if not stem[0].isdigit() else f"m_{stem}"


def runs_onnx_nodes(target: Target | CompilationConfig) -> bool:
    """Does an accelerator of the target (of any named piece) take ONNX nodes tessera lacks?

    Pass the whole target, not its `.host`: the host has the accelerators stripped.
    """
    pieces = target.pieces.values() if isinstance(target, CompilationConfig) else (target,)
    return any("onnx.opaque" in a.kind.supported_ops for piece in pieces for a in piece.accelerators)


@overload
def compile_onnx(path: str, shapes: dict[str, tuple[int, ...]], say: Say, target: str = "c", opt_level: int = 2,
                 dump_ir: bool = False, executor: Literal["graph"] = "graph", mod_name: str = "default",
                 tuning_log: str | None = None, instruments: Sequence[PassInstrument] = (),
                 config: Mapping[str, object] | None = None) -> GraphExecutorLibrary: ...
@overload
def compile_onnx(path: str, shapes: dict[str, tuple[int, ...]], say: Say, target: str = "c", opt_level: int = 2,
                 dump_ir: bool = False, *, executor: Literal["aot"], mod_name: str = "default",
                 tuning_log: str | None = None, instruments: Sequence[PassInstrument] = (),
                 config: Mapping[str, object] | None = None) -> AotLibrary: ...
@overload
def compile_onnx(path: str, shapes: dict[str, tuple[int, ...]], say: Say, target: str = "c", opt_level: int = 2,
                 dump_ir: bool = False, executor: str = "graph", mod_name: str = "default",
                 tuning_log: str | None = None, instruments: Sequence[PassInstrument] = (),
                 config: Mapping[str, object] | None = None) -> GraphExecutorLibrary | AotLibrary: ...
def compile_onnx(path: str, shapes: dict[str, tuple[int, ...]], say: Say, target: str = "c", opt_level: int = 2,
                 dump_ir: bool = False, executor: str = "graph", mod_name: str = "default",
                 tuning_log: str | None = None, instruments: Sequence[PassInstrument] = (),
                 config: Mapping[str, object] | None = None) -> GraphExecutorLibrary | AotLibrary:
    """Import and build an .onnx or .tflite file the way every subcommand does (with a tuning log's
    schedules, if given).

    `dump_ir` prints the IR after FuseOps and LowerTE to stderr; `instruments` are added to the build's
    PassContext (`tessera compile --print-ir-after`, `--timings`), and `config` to its config.
    """
    from ..backend.aot.library import AotLibrary
    from ..backend.build_module import build
    from ..target.named import is_named_targets, parse_named_targets
    from ..transform import PassContext, PrintIRInstrument
    from .model_files import import_model
    from ..tune import LOG_CONFIG_KEY, TuningLog

    config = dict(config or {})
    if tuning_log is not None:
        if Path(tuning_log).exists():  # (a missing log gets TuningLog's hint on making one)
            readable_file("--tuning-log", tuning_log)
        log = TuningLog.load(tuning_log)  # a missing or malformed log fails here, not halfway through the build
        say(f"using tuning log {tuning_log} ({len(log.records)} measurements)")
        config[LOG_CONFIG_KEY] = log
    tgt = parse_named_targets(target) if is_named_targets(target) else Target(target)
    say(f"importing {path}")
    mod, params = import_model(path, shapes, opaque_unsupported=runs_onnx_nodes(tgt))
    printed = [PrintIRInstrument(["FuseOps", "LowerTE"], sys.stderr)] if dump_ir else []
    with PassContext(opt_level=opt_level, config=config, instruments=[*printed, *instruments]) as ctx:
        lib = build(mod, target=tgt, params=params, ctx=ctx, progress=say, executor=executor, mod_name=mod_name)
    if isinstance(lib, AotLibrary):
        source = Path(path).read_bytes()
        lib.source_model = source if len(source) <= MAX_EMBEDDED_MODEL else None
        say(f"generated {len(lib.program.kernels)} kernels (python {lib.python_seconds:.1f}s)")
    else:
        kernels = lib.module.function_names if lib.module is not None else []  # (a fresh build has its module)
        say(f"compiled {len(kernels)} kernels (python {lib.python_seconds:.1f}s, "
            f"C compiler {lib.compile_seconds:.1f}s)")
        if lib.output_stage is not None:
            say(f"operators of data-dependent shape run after the graph, in onnxruntime: {_tail_ops(lib)}")
    return lib


def _tail_ops(lib: GraphExecutorLibrary) -> str:
    """The op types of the output stage's ONNX model (frontend/onnx/dynamic_tail.py)."""
    import onnx

    stage = lib.output_stage
    models = [getattr(m, "models", {}).get(stage.function) for m in lib.external_modules] if stage else []
    model = onnx.ModelProto()
    model.ParseFromString(next((m for m in models if m is not None), b""))
    return ", ".join(n.op_type for n in model.graph.node) or "(none)"


# The source model file (ONNX or TFLite) rides along in a Model Library Format export (for
# `tessera run --check`) when it is at most this big.
MAX_EMBEDDED_MODEL = 16 << 20


def print_outputs(outputs: Sequence[np.ndarray]) -> None:
    for i, out in enumerate(outputs):
        flat = out.reshape(-1)
        if out.dtype.name == "bfloat16":  # (ml_dtypes scalars do not format)
            flat = flat.astype(np.float32)
        head = ", ".join(f"{v:.6g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "")
        extra = f"  argmax={int(np.argmax(flat))}" if flat.dtype.kind == "f" and flat.size > 1 else ""
        print(f"output {i}: shape {out.shape} {out.dtype} [{head}]{extra}")
