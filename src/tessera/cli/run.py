"""`tessera run`: run a compiled model on the host or an emulated board."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TesseraError
from ..util.atomic import atomic_write_bytes, atomic_write_text
from .artefacts import executor_for_module, module_kind
from .common import compile_onnx, model_name_for, parse_shapes, print_outputs, progress
from .flags import add_load_flag, board_name, non_empty, non_negative_int, positive_int, target_string
from .inputs import InputSpec, complete_inputs, load_inputs
from .paths import make_parent, readable_file, writable_file

if TYPE_CHECKING:
    from ..runtime import GraphModule

CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-4
_NO_PROFILE_BOARD = ("--profile times each kernel of the graph executor; --board runs the aot executor under "
                     "QEMU, which has no per-kernel times (use --count-instructions for the whole inference, or "
                     "profile on the host: tessera run model.so --profile)")
_NO_PROFILE_AOT = ("--profile times each kernel of the graph executor; the aot executor runs as one C program "
                   "without per-kernel times. Profile a graph-executor build instead: tessera run model.so "
                   "--profile, or tessera run model.onnx --executor graph --profile")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run", help="run a compiled model (or compile and run an .onnx file)",
        description="Run MODULE: a .so from `tessera compile` (graph executor), a Model Library Format tarball "
                    "or folder (AOT executor), or an .onnx file compiled on the fly. With --board the model is "
                    "built with arm-none-eabi-gcc for that Cortex-M board and run under qemu-system-arm.")
    p.add_argument("module", type=non_empty,
                   help="model.so, model.tar (Model Library Format), model.onnx or model.tflite")
    p.add_argument("--executor", choices=("graph", "aot"), default=None,
                   help="how to run an .onnx file (default graph, or aot with --board); a .so is always graph, "
                        "a .tar always aot")
    p.add_argument("--board", type=board_name,
                   help="run on an emulated board: mps2-an385 (M3), mps2-an386 (M4), mps2-an500 (M7), "
                        "mps3-an547 (M55)")
    p.add_argument("-t", "--target", type=target_string,
                   help="target when MODULE is an .onnx file (default: c, or the board's core)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                   help="input values from a .npy (or .npz) file; repeatable")
    p.add_argument("--random-input", action="store_true",
                   help="fill every input not given with seeded random values: floats N(0, 1), booleans and "
                        "8-bit integers uniform over their range, wider integers uniform in [0, 15]")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed for --random-input and --check (default 0)")
    p.add_argument("--check", action="store_true",
                   help="compare the outputs with onnxruntime (LiteRT for a .tflite model) on a seeded random "
                        "input; exit 1 on a mismatch")
    p.add_argument("--compare-onnx", metavar="MODEL.onnx", type=non_empty,
                   help="the model to compare with (default: MODULE, or the one embedded in a Model Library "
                        "Format tarball); it must be the model MODULE was compiled from")
    p.add_argument("--count-instructions", action="store_true", help="count guest instructions (with --board)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                   help="input shapes when MODULE is an .onnx file with symbolic dimensions")
    p.add_argument("--tuning-log", metavar="LOG.json", type=non_empty,
                   help="when MODULE is an .onnx file: use the schedules measured by `tessera tune`")
    p.add_argument("--repeat", type=positive_int, default=1,
                   help="graph executor: run this many times, print the median latency (default 1)")
    p.add_argument("--profile", action="store_true",
                   help="graph executor: time every kernel and print the slowest, their share and fused operators")
    p.add_argument("--profile-trace", metavar="FILE.json", type=non_empty,
                   help="graph executor: write the kernel times as a Chrome trace (chrome://tracing, Perfetto)")
    p.add_argument("--output", metavar="FILE.npz", type=non_empty, help="save the outputs (arr_0, arr_1, ...)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    add_load_flag(p)
    p.set_defaults(func=run)


@dataclass
class Opened:
    """A module ready to run: its inputs by position, how to run it, and its embedded ONNX model if any."""

    specs: list[InputSpec]
    execute: Callable[[Sequence[np.ndarray]], list[np.ndarray]]
    reference: str | bytes | None = None
    owner: object = None  # keeps temporary files (an unpacked tarball) alive while the module runs


def _check_flags(args: argparse.Namespace, executor: str) -> None:
    """Flags that do not fit MODULE or each other, refused before anything is built."""
    compiled = module_kind(args.module) != "onnx"
    for flag, value in (("-t", args.target), ("--input-shape", args.input_shape), ("--tuning-log", args.tuning_log)):
        if compiled and value:
            raise TesseraError(f"{flag} applies when MODULE is an .onnx file; {args.module} is already compiled "
                               "(pass it to `tessera compile`)")
    if args.count_instructions and not args.board:
        raise TesseraError("--count-instructions needs --board (instructions are counted under QEMU)")
    if args.repeat != 1 and executor != "graph":
        raise TesseraError(f"--repeat {args.repeat} times the graph executor; the aot executor runs once "
                           "(use --count-instructions with --board to measure it)")
    if (args.profile or args.profile_trace) and executor != "graph":
        raise TesseraError(_NO_PROFILE_BOARD if args.board else _NO_PROFILE_AOT)
    if args.profile_trace:
        writable_file("--profile-trace", args.profile_trace)
    if args.check and args.compare_onnx is None and module_kind(args.module) == "library":
        raise TesseraError(f"--check: {args.module} holds no ONNX model; pass --compare-onnx MODEL.onnx")
    if args.compare_onnx:
        readable_file("--compare-onnx", args.compare_onnx)
    if args.tuning_log and Path(args.tuning_log).exists():
        readable_file("--tuning-log", args.tuning_log)
    if args.output:
        if not args.output.endswith(".npz"):
            raise TesseraError(f"--output {args.output}: outputs are saved with numpy.savez; name the file "
                               "FILE.npz")
        writable_file("--output", args.output)
    parse_shapes(args.input_shape)  # malformed shapes fail now, not after the module is loaded


def run(args: argparse.Namespace) -> int:
    from .reference import check_outputs, compare, load_reference, match_inputs, named_like, oracle_name, \
        run_reference

    executor = executor_for_module(args.module, args.executor, args.board)
    _check_flags(args, executor)
    comparing = args.check or args.compare_onnx is not None
    label = f"--compare-onnx {args.compare_onnx}" if args.compare_onnx else f"the ONNX model of {args.module}"
    reference = load_reference(args.compare_onnx, label) if args.compare_onnx else None  # fails before a build
    with contextlib.ExitStack() as stack:
        opened = (_open_aot if executor == "aot" else _open_graph)(args, stack)
        if reference is None and opened.reference is not None:
            reference = load_reference(opened.reference, label)
        specs = opened.specs
        if comparing:
            if reference is None:
                raise TesseraError(f"--check: {args.module} holds no ONNX model; pass --compare-onnx MODEL.onnx")
            specs = match_inputs(reference, specs, label)
        elif reference is not None:
            specs = named_like(reference, specs)
        values = complete_inputs(load_inputs(args.input, specs), specs, args.random_input or args.check, args.seed)
        outputs = opened.execute(values)
    print_outputs(outputs)
    if args.output:
        buffer = io.BytesIO()
        np.savez(buffer, *outputs)
        atomic_write_bytes(make_parent(Path(args.output)), buffer.getvalue())
        print(f"wrote {args.output}")
    if not comparing or reference is None:  # a comparison has its reference (checked above)
        return 0
    expected = run_reference(reference, label, values)
    check_outputs(outputs, expected, label)
    if not compare(outputs, expected, CHECK_RTOL, CHECK_ATOL, oracle_name(reference)) and args.check:
        print("CHECK FAILED")
        return 1
    if args.check:
        print("CHECK OK")
    return 0


def _open_graph(args: argparse.Namespace, stack: contextlib.ExitStack) -> Opened:
    from ..runtime import GraphModule, load_module

    say = progress(args.quiet)
    reference = None
    if module_kind(args.module) == "onnx":
        lib = compile_onnx(args.module, parse_shapes(args.input_shape), say, args.target or "c",
                           tuning_log=args.tuning_log)
        reference = args.module
    else:
        lib = load_module(Path(args.module).absolute())  # a bare "model.so" is not searched for on the system path
    gm = GraphModule(lib)
    # by position: two inputs may share a name (see inputs.py), and lib.input_names keeps both
    specs = [InputSpec((name,), gm.input_shape(k), np.dtype(gm.input_dtype(k)))
             for k, name in enumerate(lib.input_names)]

    def execute(values: Sequence[np.ndarray]) -> list[np.ndarray]:
        for k, value in enumerate(values):
            gm.set_input(k, value)
        gm.run()
        outputs = [gm.get_output(i) for i in range(gm.num_outputs)]
        if args.repeat > 1:
            times = gm.benchmark(args.repeat)
            print(f"latency: median {np.median(times) * 1e3:.3f} ms over {args.repeat} runs")
        if args.profile or args.profile_trace:
            _profile(gm, args)
        return outputs

    return Opened(specs, execute, reference)


def _profile(gm: GraphModule, args: argparse.Namespace) -> None:
    """--profile and --profile-trace: the kernel times of the inputs just run."""
    import json

    from ..runtime.kernel_profile import profile_kernels

    profile = profile_kernels(gm, repeat=max(args.repeat, 3))
    if args.profile:
        print(profile.table())
    if args.profile_trace:
        trace = profile.chrome_trace(Path(args.module).name)
        atomic_write_text(make_parent(Path(args.profile_trace)), json.dumps(trace, indent=1) + "\n")
        print(f"wrote {args.profile_trace}")


def _open_aot(args: argparse.Namespace, stack: contextlib.ExitStack) -> Opened:
    import tempfile

    from ..backend.aot.runner import MlfModel, run_on_board, run_on_host
    from ..micro.boards import get_board
    from ..target import Target
    from ..target.builtin import c_toolchain

    say = progress(args.quiet)
    board = get_board(args.board) if args.board is not None else None
    reference: str | bytes | None = None
    owner: object = None
    if module_kind(args.module) == "onnx":
        target = args.target or (board.target_string if board else "c")
        lib = compile_onnx(args.module, parse_shapes(args.input_shape), say, target, executor="aot",
                           mod_name=model_name_for(args.module), tuning_log=args.tuning_log)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tessera-run-"))
        folder, sig = lib.export_library(Path(tmp)), lib.signature
        reference = args.module
    else:
        mlf = MlfModel(Path(args.module).absolute())
        owner = mlf
        folder, sig = mlf.folder, mlf.signature
        if mlf.reference_model is not None:
            reference = mlf.reference_model.read_bytes()
    specs = [InputSpec((t.name,), tuple(t.type.shape), np.dtype(t.type.dtype)) for t in sig.inputs]

    def execute(values: Sequence[np.ndarray]) -> list[np.ndarray]:
        if board is None:
            say("building and running on the host")
            return run_on_host(folder, sig, list(values), c_toolchain(Target("c")))
        say(f"building for {board.name} ({board.cpu}) and running under QEMU")
        outputs, result = run_on_board(folder, sig, board.name, list(values), args.count_instructions)
        s = result.sizes
        print(f"{board.name}: flash {s.flash} bytes (.text {s.text} + .rodata {s.rodata} + .data {s.data}), "
              f"RAM {s.ram} bytes (.data {s.data} + .bss {s.bss} + pools in .arena {s.arena})")
        if result.inference_instructions is not None:
            print(f"instructions per inference: {result.inference_instructions} "
                  f"(whole program: {result.qemu.instructions})")
        print(f"QEMU ran for {result.qemu.seconds:.2f} s")
        return outputs

    return Opened(specs, execute, reference, owner)
