"""`tessera tune`: measure schedule candidates for a model's kernels, write a tuning log."""

from __future__ import annotations

import argparse

from ..errors import TesseraError
from .common import parse_shapes, progress, runs_onnx_nodes
from .flags import add_load_flag, non_empty, positive_int, positive_seconds, target_string
from .paths import make_parent, readable_file, writable_file


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune", help="measure schedules for a model's kernels on this machine",
        description="Find MODEL.onnx's tunable kernels (e.g. convolution register tiles), build and time each "
                    "candidate schedule on this machine, and write every measurement to LOG.json. An existing "
                    "log is extended: configurations it holds are not measured again. Use the log with "
                    "`tessera compile --tuning-log LOG.json` (or `tessera run`). Logs are machine-specific. "
                    "With --board, Cortex-M kernels are built for that emulated board and ranked by the "
                    "instructions QEMU counts.")
    p.add_argument("model", help="path to an .onnx or .tflite file")
    p.add_argument("-o", "--output", required=True, metavar="LOG.json", type=non_empty,
                   help="the tuning log to write (or extend)")
    p.add_argument("-t", "--target", default="c", type=target_string,
                   help="target the kernels are built for (default c)")
    p.add_argument("--board", metavar="BOARD",
                   help="count instructions on this emulated Cortex-M board under QEMU instead of timing here "
                        "(e.g. mps2-an386; -t defaults to its core); deterministic")
    p.add_argument("--trials", type=positive_int, metavar="N",
                   help="at most N configurations per kernel (default all)")
    p.add_argument("--budget", type=positive_seconds, metavar="SECONDS",
                   help="start no new measurement after this many seconds (default no limit)")
    p.add_argument("--repeat", type=positive_int, default=5,
                   help="timing samples per configuration (default 5; counts on a --board need one)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                   help="fix an input's shape (needed when the model has symbolic dimensions); repeatable")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="threads each kernel runs on while measured (default 1)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    add_load_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..target import Target
    from ..target.named import is_named_targets
    from ..tune import tune
    from .model_files import import_model

    if is_named_targets(args.target):
        raise TesseraError(f"-t {args.target!r}: tessera tune measures one target at a time, not named pieces; "
                           "run it once per piece's target with the same -o (one log holds them all)")
    readable_file("model", args.model)
    out = writable_file("-o", args.output)
    if out.exists():  # an existing log is extended, so it is read first
        readable_file("-o", args.output)
    shapes = parse_shapes(args.input_shape)
    say = progress(args.quiet)
    if args.board:
        from ..micro.boards import get_board

        board = get_board(args.board)  # an unknown name fails here, before the import
        if args.target == "c":
            args.target = board.target_string
    target = Target(args.target)
    say(f"importing {args.model}")
    mod, params = import_model(args.model, shapes, opaque_unsupported=runs_onnx_nodes(target))
    make_parent(out)
    tuned = tune(mod, target, params, log=out, trials=args.trials, budget=args.budget, progress=say,
                 repeat=args.repeat, threads=args.threads, board=args.board)
    print(f"{len(tuned.results)} tunable kernels, {tuned.measured} configurations measured in {tuned.seconds:.1f} s")
    if args.board:
        _print_instructions(tuned, args.board)
    else:
        _print_seconds(tuned)
    if not out.exists():
        tuned.log.save(out)  # a model without tunable kernels still gets a (empty) log
    print(f"wrote {out} ({len(tuned.log.records)} measurements)")
    return 0


def _print_instructions(tuned, board: str) -> None:
    counted = [r for r in tuned.results if r.default_instructions is not None and r.best_instructions is not None]
    if counted:
        default = sum(r.default_instructions for r in counted)
        best = sum(r.best_instructions for r in counted)
        print(f"sum over kernels on {board}: default schedules {default} instructions, tuned {best} "
              f"({default / best:.3f}x)")


def _print_seconds(tuned) -> None:
    from ..tune.tuner import config_text

    default = sum(r.default_seconds or 0.0 for r in tuned.results)
    best = sum(r.seconds.get(config_text(r.best), 0.0) for r in tuned.results if r.best is not None)
    if tuned.results and default and best:
        print(f"sum over kernels: default schedules {default * 1e3:.3f} ms, tuned {best * 1e3:.3f} ms "
              f"({default / best:.2f}x)")

