"""Helpers shared by the `tessera` subcommands."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import TesseraError


def progress(quiet: bool):
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
            shapes[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise TesseraError(f"--input-shape {spec!r}: dimensions must be integers") from None
    return shapes


def model_name_for(path: str) -> str:
    """A C identifier from a model file name: `digits_cnn.onnx` -> `digits_cnn`."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", Path(path).stem) or "model"
    return stem if not stem[0].isdigit() else f"m_{stem}"


def runs_onnx_nodes(target) -> bool:
    """Does an accelerator of the target take ONNX nodes tessera lacks?"""
    from ..transform.annotate_target import SUPPORTED_OPS

    return any("onnx.opaque" in (a.kind.get_attr(SUPPORTED_OPS) or {}) for a in target.accelerators)


def compile_onnx(path: str, shapes: dict[str, tuple[int, ...]], say, target: str = "c", opt_level: int = 2,
                 dump_ir: bool = False, executor: str = "graph", mod_name: str = "default",
                 tuning_log: str | None = None):
    """Import and build an ONNX file the way every subcommand does (with a tuning log's schedules, if given)."""
    import tessera
    from ..frontend import from_onnx
    from ..target import Target
    from ..target.named import is_named_targets, parse_named_targets
    from ..transform import PassContext, PrintIRInstrument
    from ..tune import LOG_CONFIG_KEY, TuningLog

    config = {}
    if tuning_log is not None:
        log = TuningLog.load(tuning_log)  # a missing or malformed log fails here, not halfway through the build
        say(f"using tuning log {tuning_log} ({len(log.records)} measurements)")
        config[LOG_CONFIG_KEY] = log
    tgt = parse_named_targets(target) if is_named_targets(target) else Target(target)
    host = tgt.host
    say(f"importing {path}")
    mod, params = from_onnx(path, shape=shapes or None, opaque_unsupported=runs_onnx_nodes(host))
    instruments = [PrintIRInstrument(["FuseOps", "LowerTE"], sys.stderr)] if dump_ir else []
    with PassContext(opt_level=opt_level, config=config, instruments=instruments) as ctx:
        lib = tessera.build(mod, target=tgt, params=params, ctx=ctx, progress=say, executor=executor,
                            mod_name=mod_name)
    if executor == "aot":
        source = Path(path).read_bytes()
        lib.source_model = source if len(source) <= MAX_EMBEDDED_MODEL else None
        say(f"generated {len(lib.program.kernels)} kernels (python {lib.python_seconds:.1f}s)")
    else:
        say(f"compiled {len(lib.module.function_names)} kernels (python {lib.python_seconds:.1f}s, "
            f"C compiler {lib.compile_seconds:.1f}s)")
    return lib


# The source ONNX file rides along in a Model Library Format export (for
# `tessera run --check`) when it is at most this big.
MAX_EMBEDDED_MODEL = 16 << 20


def load_inputs(specs: Sequence[str], names: list[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep:
            if len(names) != 1:
                raise TesseraError(f"--input {spec!r}: name the input (NAME=FILE); inputs are {names}")
            name, file = names[0], spec
        if name not in names:
            raise TesseraError(f"--input {spec!r}: the model has no input {name!r}; inputs are {names}")
        if file.endswith(".npz"):
            with np.load(file) as data:
                inputs[name] = data[name] if name in data else data[data.files[0]]
        else:
            inputs[name] = np.load(file)
    return inputs


def complete_inputs(inputs: dict[str, np.ndarray], specs: Sequence[tuple[str, tuple[int, ...], str]],
                    random_input: bool, seed: int) -> dict[str, np.ndarray]:
    """Fill inputs not given with seeded random values (if allowed)."""
    rng = np.random.default_rng(seed)
    for name, shape, dtype in specs:
        if name not in inputs:
            if not random_input:
                raise TesseraError(f"no value for input {name!r}; pass --input {name}=FILE.npy or --random-input")
            inputs[name] = rng.standard_normal(shape).astype(dtype)
    return inputs


def print_outputs(outputs: Sequence[np.ndarray]) -> None:
    for i, out in enumerate(outputs):
        flat = out.reshape(-1)
        head = ", ".join(f"{v:.6g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "")
        extra = f"  argmax={int(np.argmax(flat))}" if out.dtype.kind == "f" and flat.size > 1 else ""
        print(f"output {i}: shape {out.shape} {out.dtype} [{head}]{extra}")


def compare(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float, atol: float) -> bool:
    """Print the largest difference per output; True when all are within tolerance."""
    ok = True
    for k, (a, b) in enumerate(zip(outputs, expected)):
        diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        within = bool(np.allclose(a, b, rtol=rtol, atol=atol))
        ok &= within
        print(f"output {k}: max |tessera - onnxruntime| = {diff:.3g} "
              f"({'within' if within else 'OUTSIDE'} rtol={rtol:g}, atol={atol:g})")
    return ok
