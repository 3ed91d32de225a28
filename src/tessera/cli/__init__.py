"""The `tessera` command line.

    tessera compile MODEL.onnx -o model.so            compile for the host (graph executor)
    tessera compile MODEL.onnx --executor aot -t "c -mcpu=cortex-m4" -o model.tar
    tessera run model.so --input image=x.npy          run on the host
    tessera run MODEL.onnx --board mps2-an386 --check run on an emulated Cortex-M4, compare with onnxruntime
    tessera tune MODEL.onnx -o log.json               measure kernel schedules on this machine
    tessera compile MODEL.onnx --tuning-log log.json -o model.so
    tessera ops | tessera targets [KIND]              what tessera supports
    tessera --version                                 versions of tessera, Python, numpy and onnx
    tessera compile ... --load my_target_module       import a module that registers target kinds first

Target kinds of installed packages (the `tessera.targets` entry point group)
are loaded when the command starts.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from ..errors import TesseraError
from . import compile as compile_cmd
from . import info, run as run_cmd, tune as tune_cmd
from .progress_bar import progress_bars

EXIT_STATUS = ("exit status: 0 on success, 1 when `run --check` finds a mismatch, 2 on an error "
               "(a bad flag or file, or a model tessera cannot compile)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tessera",
        description="tessera, a deep-learning compiler: ONNX models to C, run on the host or a microcontroller.",
        epilog=EXIT_STATUS,
    )
    parser.add_argument("--version", action=info.VersionAction,
                        help="print the versions of tessera, Python, numpy and onnx, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    compile_cmd.add_parser(sub)
    run_cmd.add_parser(sub)
    tune_cmd.add_parser(sub)
    info.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (argparse's own exits included, so callers get a number)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a bad flag (argparse printed usage and the error)
        return stop.code if isinstance(stop.code, int) else 2
    try:
        _load_targets(getattr(args, "load", ()))
        with progress_bars(getattr(args, "quiet", False)), warnings.catch_warnings():  # bars only on a terminal
            warnings.showwarning = _show_warning
            status: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, in the handler below, not at the interpreter's exit
        return status
    except BrokenPipeError:  # the reader went away (`| head`): every file was written first, so nothing is lost
        _silence_stdout()
        return 0
    except (TesseraError, OSError) as err:  # OSError: a file that vanished or cannot be written mid-way
        print(f"tessera: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tessera: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not raise on the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """Warnings as the command's own messages ("tessera: warning: ..."), not as Python source locations."""
    print(f"tessera: warning: {message}", file=sys.stderr)


def _load_targets(modules: Sequence[str]) -> None:
    from ..target.plugins import load_module, load_plugins

    load_plugins()
    for name in modules:
        load_module(name)


if __name__ == "__main__":
    sys.exit(main())
