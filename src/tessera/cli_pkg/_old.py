"""The `tessera` command line.

    tessera compile MODEL.onnx -o model.so        compile for the host (graph executor)
    tessera run model.so --input image=x.npy      run a compiled model (or an .onnx directly)
    tessera ops                                   list the ONNX operators tessera imports
    tessera targets [KIND]                        list target kinds, attributes and hooks
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .errors import TesseraError


def _progress(quiet: bool):
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


def _runs_onnx_nodes(target) -> bool:
    """Does an accelerator of the target take ONNX nodes tessera lacks?"""
    from .transform.annotate_target import SUPPORTED_OPS

    return any("onnx.opaque" in (a.kind.get_attr(SUPPORTED_OPS) or {}) for a in target.accelerators)


def compile_onnx(path: str, shapes: dict[str, tuple[int, ...]], opt_level: int, say, dump_ir: bool = False,
                 target: str = "c"):
    import tessera
    from .frontend import from_onnx
    from .target import Target
    from .transform import PassContext, PrintIRInstrument

    tgt = Target(target)
    say(f"importing {path}")
    mod, params = from_onnx(path, shape=shapes or None, opaque_unsupported=_runs_onnx_nodes(tgt))
    instruments = [PrintIRInstrument(["FuseOps", "LowerTE"], sys.stderr)] if dump_ir else []
    with PassContext(opt_level=opt_level, instruments=instruments) as ctx:
        lib = tessera.build(mod, target=tgt, params=params, ctx=ctx, progress=say)
    kernels = len(lib.module.function_names)
    say(f"compiled {kernels} kernels (python {lib.python_seconds:.1f}s, C compiler {lib.compile_seconds:.1f}s)")
    return lib


def cmd_compile(args: argparse.Namespace) -> int:
    say = _progress(args.quiet)
    lib = compile_onnx(args.model, parse_shapes(args.input_shape), args.opt_level, say, args.dump_ir,
                       args.target)
    if args.report:
        from .backend.report import partition_report

        report = partition_report(lib)
        print(report.text())
        Path(args.report).write_text(report.html(f"tessera: {Path(args.model).name} for {args.target}"))
        print(f"wrote {args.report}")
    out = Path(args.output)
    say(f"exporting {out}")
    lib.export_library(out)
    if args.emit_c:
        folder = Path(args.emit_c)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in lib.c_sources.items():
            (folder / name).write_text(text)
        say(f"wrote generated C to {folder}/")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


def _load_inputs(specs: Sequence[str], names: list[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep:
            if len(names) != 1:
                raise TesseraError(f"--input {spec!r}: name the input (NAME=FILE); inputs are {names}")
            name, file = names[0], spec
        if file.endswith(".npz"):
            with np.load(file) as data:
                inputs[name] = data[name] if name in data else data[data.files[0]]
        else:
            inputs[name] = np.load(file)
    return inputs


def cmd_run(args: argparse.Namespace) -> int:
    from .runtime import GraphModule, load_module

    say = _progress(args.quiet)
    if args.module.endswith(".onnx"):
        lib = compile_onnx(args.module, parse_shapes(args.input_shape), 2, say, target=args.target)
    else:
        lib = load_module(args.module)
    gm = GraphModule(lib)
    names = gm.input_names
    inputs = _load_inputs(args.input, names)
    rng = np.random.default_rng(args.seed)
    for k, name in enumerate(names):
        if name not in inputs:
            if not args.random_input:
                raise TesseraError(f"no value for input {name!r}; pass --input {name}=FILE.npy or --random-input")
            shape, dtype = gm.input_shape(k), gm.input_dtype(k)
            inputs[name] = rng.standard_normal(shape).astype(dtype)
    gm.set_input(**inputs)
    gm.run()
    outputs = [gm.get_output(i) for i in range(gm.num_outputs)]
    if args.repeat > 1:
        times = gm.benchmark(args.repeat)
        print(f"latency: median {np.median(times) * 1e3:.3f} ms over {args.repeat} runs")
    for i, out in enumerate(outputs):
        flat = out.reshape(-1)
        head = ", ".join(f"{v:.6g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "")
        extra = f"  argmax={int(np.argmax(flat))}" if out.dtype.kind == "f" and flat.size > 1 else ""
        print(f"output {i}: shape {out.shape} {out.dtype} [{head}]{extra}")
    if args.output:
        np.savez(args.output, *outputs)
        print(f"wrote {args.output}")
    if args.compare_onnx:
        from .testing.models import ort_run
        import onnx

        expected = ort_run(onnx.load(args.compare_onnx), inputs)
        worst = max(float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(outputs, expected))
        print(f"max |tessera - onnxruntime| = {worst:.3g}")
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from .frontend.onnx import ops  # noqa: F401
    from .frontend.onnx.registry import CONVERTERS

    names = CONVERTERS.op_types()
    print(f"{len(names)} ONNX operators:")
    print(", ".join(names))
    return 0


def cmd_targets(args: argparse.Namespace) -> int:
    from .target import KINDS
    from .target.describe import describe_all, describe_kind

    print(describe_kind(KINDS.get(args.kind)) if args.kind else describe_all())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tessera",
        description="tessera, a deep-learning compiler: ONNX models to C, run on the host or a microcontroller.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("compile", help="compile an ONNX model into a shared library",
                       description="Compile MODEL.onnx for the host CPU into one shared library holding the "
                                   "kernels, the graph and the weights. Run it with `tessera run`.")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("-o", "--output", required=True, help="output file, e.g. model.so")
    p.add_argument("-t", "--target", default="c",
                   help="target: a string like 'c' or 'c -march=skylake', or an alias such as 'blas' "
                        "or 'onnxruntime' (see `tessera targets`); default c")
    p.add_argument("--report", metavar="FILE.html",
                   help="print which operators went to which target and draw the graph coloured by target")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                   help="fix an input's shape (needed when the model has symbolic dimensions); repeatable")
    p.add_argument("--opt-level", type=int, default=2, choices=range(0, 4),
                   help="0 = one kernel per operator, >= 1 fuses and folds constants (default 2)")
    p.add_argument("--emit-c", metavar="DIR", help="also write the generated C sources to DIR")
    p.add_argument("--dump-ir", action="store_true", help="print the IR after fusion and lowering to stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run a compiled model (or compile and run an .onnx file)",
                       description="Run a library written by `tessera compile` (or an .onnx file, compiled "
                                   "on the fly) and print its outputs.")
    p.add_argument("module", help="a .so from `tessera compile`, or an .onnx model")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                   help="input values from a .npy (or .npz) file; repeatable")
    p.add_argument("--random-input", action="store_true", help="fill inputs not given with seeded random values")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-input (default 0)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                   help="input shapes when MODULE is an .onnx file with symbolic dimensions")
    p.add_argument("-t", "--target", default="c", help="target when MODULE is an .onnx file (default c)")
    p.add_argument("--compare-onnx", metavar="MODEL.onnx", help="also run MODEL.onnx in onnxruntime and print the max difference")
    p.add_argument("--repeat", type=int, default=1, help="run this many times and print the median latency")
    p.add_argument("--output", metavar="FILE.npz", help="save the outputs")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("ops", help="list the ONNX operators tessera can import")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser("targets", help="list target kinds with their attributes, defaults and hooks",
                       description="Without KIND: every registered target kind and alias. With KIND: that kind.")
    p.add_argument("kind", nargs="?", help="a target kind name, e.g. c")
    p.set_defaults(func=cmd_targets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TesseraError as err:
        print(f"tessera: error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"tessera: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
