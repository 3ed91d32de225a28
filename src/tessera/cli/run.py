"""`tessera run`: run a compiled model on the host or an emulated board."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np

from ..errors import TesseraError
from ..util.atomic import atomic_write_bytes
from .common import (
    compare, compile_onnx, complete_inputs, load_inputs, model_name_for, parse_shapes, print_outputs, progress,
)

CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-4


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run", help="run a compiled model (or compile and run an .onnx file)",
        description="Run MODULE: a .so from `tessera compile`, a Model Library Format tarball (--executor aot), "
                    "or an .onnx file compiled on the fly. With --board the model is built with "
                    "arm-none-eabi-gcc for that Cortex-M board and run under qemu-system-arm.")
    p.add_argument("module", help="model.so, model.tar (Model Library Format) or model.onnx")
    p.add_argument("--executor", choices=("graph", "aot"), default=None,
                   help="how to run an .onnx file (default graph, or aot with --board); a .tar is always aot")
    p.add_argument("--board", help="run on an emulated board: mps2-an385 (M3), mps2-an386 (M4), mps2-an500 (M7), "
                                   "mps3-an547 (M55)")
    p.add_argument("-t", "--target", help="target when MODULE is an .onnx file (default: c, or the board's core)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                   help="input values from a .npy (or .npz) file; repeatable")
    p.add_argument("--random-input", action="store_true", help="fill inputs not given with seeded random values")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-input and --check (default 0)")
    p.add_argument("--check", action="store_true",
                   help="compare the outputs with onnxruntime on a seeded random input; exit 1 on a mismatch")
    p.add_argument("--compare-onnx", metavar="MODEL.onnx", help="the model to compare with (default: MODULE, "
                   "or the one embedded in a Model Library Format tarball)")
    p.add_argument("--count-instructions", action="store_true", help="count guest instructions (with --board)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                   help="input shapes when MODULE is an .onnx file with symbolic dimensions")
    p.add_argument("--tuning-log", metavar="LOG.json",
                   help="when MODULE is an .onnx file: use the schedules measured by `tessera tune`")
    p.add_argument("--repeat", type=int, default=1, help="graph executor: run this many times, print the median latency")
    p.add_argument("--output", metavar="FILE.npz", help="save the outputs")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.check:
        args.random_input = True
    executor = args.executor or ("aot" if args.board or args.module.endswith(".tar") or Path(args.module).is_dir()
                                 else "graph")
    if args.board and executor != "aot":
        raise TesseraError("--board runs AOT-compiled C; use --executor aot (or drop --executor)")
    if args.count_instructions and not args.board:
        raise TesseraError("--count-instructions needs --board (instructions are counted under QEMU)")
    if args.tuning_log and not args.module.endswith(".onnx"):
        raise TesseraError(f"--tuning-log applies when compiling an .onnx file; {args.module} is already compiled "
                           "(pass the log to `tessera compile`)")
    outputs, inputs, reference = (_run_aot if executor == "aot" else _run_graph)(args)
    print_outputs(outputs)
    if args.output:
        buffer = io.BytesIO()
        np.savez(buffer, *outputs)
        atomic_write_bytes(args.output, buffer.getvalue())
        print(f"wrote {args.output}")
    if args.check or args.compare_onnx:
        if reference is None:
            raise TesseraError("no ONNX model to compare with: pass --compare-onnx MODEL.onnx")
        from ..testing.models import is_quantized, ort_run
        import onnx

        model = onnx.load_from_string(reference) if isinstance(reference, bytes) else onnx.load(str(reference))
        # int8 models: compare with ONNX's definition, which tessera matches bit for bit (docs/quantization.md)
        expected = ort_run(model, inputs, optimize=not is_quantized(model))
        if not compare(outputs, expected, CHECK_RTOL, CHECK_ATOL) and args.check:
            print("CHECK FAILED")
            return 1
        if args.check:
            print("CHECK OK")
    return 0


def _run_graph(args: argparse.Namespace):
    from ..runtime import GraphModule, load_module

    say = progress(args.quiet)
    reference = args.compare_onnx
    if args.module.endswith(".onnx"):
        lib = compile_onnx(args.module, parse_shapes(args.input_shape), say, args.target or "c",
                           tuning_log=args.tuning_log)
        reference = reference or args.module
    else:
        lib = load_module(args.module)
    gm = GraphModule(lib)
    names = gm.input_names
    specs = [(n, gm.input_shape(k), gm.input_dtype(k)) for k, n in enumerate(names)]
    inputs = complete_inputs(load_inputs(args.input, names), specs, args.random_input, args.seed)
    gm.set_input(**inputs)
    gm.run()
    outputs = [gm.get_output(i) for i in range(gm.num_outputs)]
    if args.repeat > 1:
        times = gm.benchmark(args.repeat)
        print(f"latency: median {np.median(times) * 1e3:.3f} ms over {args.repeat} runs")
    return outputs, inputs, reference


def _run_aot(args: argparse.Namespace):
    from ..backend.aot.runner import MlfModel, run_on_board, run_on_host
    from ..micro.boards import get_board
    from ..target.builtin import c_toolchain
    from ..target import Target
    import tempfile

    say = progress(args.quiet)
    board = get_board(args.board) if args.board else None
    reference = args.compare_onnx
    with tempfile.TemporaryDirectory(prefix="tessera-run-") as tmp:
        if args.module.endswith(".onnx"):
            target = args.target or (board.target_string if board else "c")
            lib = compile_onnx(args.module, parse_shapes(args.input_shape), say, target, executor="aot",
                               mod_name=model_name_for(args.module), tuning_log=args.tuning_log)
            folder, sig = lib.export_library(Path(tmp)), lib.signature
            reference = reference or args.module
        else:
            mlf = MlfModel(args.module)
            folder, sig = mlf.folder, mlf.signature
            if reference is None and mlf.reference_model is not None:
                reference = mlf.reference_model.read_bytes()  # the folder goes away with `mlf`
        names = [t.name for t in sig.inputs]
        specs = [(t.name, t.type.shape, t.type.dtype) for t in sig.inputs]
        inputs = complete_inputs(load_inputs(args.input, names), specs, args.random_input, args.seed)
        values = [inputs[n] for n in names]
        if board is None:
            say("building and running on the host")
            outputs = run_on_host(folder, sig, values, c_toolchain(Target("c")))
        else:
            say(f"building for {board.name} ({board.cpu}) and running under QEMU")
            outputs, result = run_on_board(folder, sig, board.name, values, args.count_instructions)
            s = result.sizes
            print(f"{board.name}: flash {s.flash} bytes (.text {s.text} + .rodata {s.rodata} + .data {s.data}), "
                  f"RAM {s.ram} bytes (.data {s.data} + .bss {s.bss} + pools in .arena {s.arena})")
            if result.inference_instructions is not None:
                print(f"instructions per inference: {result.inference_instructions} "
                      f"(whole program: {result.qemu.instructions})")
            print(f"QEMU ran for {result.qemu.seconds:.2f} s")
    return outputs, inputs, reference
