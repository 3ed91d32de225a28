"""Value types for the subcommands' flags.

Each is an argparse `type=`: a bad value stops the command before any work,
with argparse's usage line and "argument --flag: got X, expected Y" (exit 2).
"""

from __future__ import annotations

import argparse
import math

from ..errors import TesseraError


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer") from None


def positive_int(text: str) -> int:
    """A count that must be at least 1 (repeats, trials, threads)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {value}, expected an integer >= 1")
    return value


def non_negative_int(text: str) -> int:
    """A seed: numpy's generators take integers >= 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"got {value}, expected an integer >= 0")
    return value


def positive_seconds(text: str) -> float:
    """A time budget: a finite number of seconds above zero (nan and inf would mean no budget)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"got {text}, expected a finite number of seconds > 0")
    return value


def non_empty(text: str) -> str:
    """A name or path: an empty string would silently mean the default (or the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("got an empty string, expected a value")
    return text


def add_load_flag(parser: argparse.ArgumentParser) -> None:
    """--load MODULE: import a module that registers target kinds before the command runs."""
    parser.add_argument("--load", action="append", default=[], metavar="MODULE", type=non_empty,
                        help="import MODULE first, for the target kinds it registers (e.g. a target package "
                             "not installed with a tessera.targets entry point); repeatable")


def target_string(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "got an empty string, expected a target such as 'c' or 'c -mcpu=cortex-m7' (see `tessera targets`)")
    return text


def board_name(text: str) -> str:
    from ..micro.boards import BOARDS, get_board

    if not text.strip():
        raise argparse.ArgumentTypeError(f"got an empty string, expected one of: {', '.join(BOARDS)}")
    try:
        return get_board(text).name
    except TesseraError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def c_module_name(text: str) -> str:
    """--mod-name: the prefix of generated C symbols, so a C identifier."""
    from ..backend.build_module import check_mod_name

    try:
        return check_mod_name(non_empty(text))
    except TesseraError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
