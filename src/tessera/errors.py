"""The error hierarchy of tessera.

Every error a user can provoke derives from `TesseraError`, so callers can
catch one type; the subclasses say which stage found the problem. Messages
follow the form "got X, expected Y" and list the valid choices.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TesseraError(Exception):
    """Base class of every error tessera raises on bad input."""


class ConversionError(TesseraError):
    """A model could not be imported (malformed or unsupported)."""


class UnsupportedOperatorError(ConversionError):
    """The model uses an operator (or a form of it) tessera cannot import."""


class TypeInferenceError(TesseraError):
    """Shapes or dtypes of a graph do not fit an operator's type relation."""


class CompileError(TesseraError):
    """Lowering, code generation or the C compiler failed."""


class InvalidValueError(TesseraError):
    """Tensor values break an operator's contract (an index out of range,
    an integer division by zero), found at compile time."""


class RuntimeExecutionError(TesseraError):
    """A compiled module was given inputs it cannot run with."""


class ArtifactError(TesseraError):
    """A file tessera writes or reads back (library, archive, cache entry) is unusable:
    damaged, truncated, of the wrong kind, or its path is taken by something else."""


class VerificationError(TesseraError):
    """IR breaks an invariant of Relay or TIR (an unbound variable, an
    undeclared buffer, mismatched dtypes). Raised by the verifiers in
    `relay/verify.py` and `tir/verify.py`; it points at a bug in the pass or
    hook that built the IR, not at the model."""


class KernelFailure(RuntimeExecutionError):
    """A compiled kernel stopped with a non-zero status (see tessera.crt.status)."""

    def __init__(self, message: str, kernel: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.status = status


def edit_distance(a: str, b: str) -> int:
    """Damerau-Levenshtein distance (a swap of neighbours counts as one edit)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix for a misspelt name, or ''."""
    options = list(choices)
    if not options:
        return ""
    best = min(options, key=lambda c: (edit_distance(name.lower(), c.lower()), c))
    # a suggestion must keep some of what was typed: 'c' is not a misspelling of 'a'
    limit = min(max(1, len(name) // 3), max(len(name), len(best)) - 1)
    if edit_distance(name.lower(), best.lower()) <= limit:
        return f" (did you mean {best!r}?)"
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def format_choices(choices: Iterable[str], limit: int = 0) -> str:
    """Sorted, comma-separated choices, optionally cut after `limit` items."""
    items = sorted(set(choices))
    if limit and len(items) > limit:
        return ", ".join(items[:limit]) + f", ... ({len(items)} in all)"
    return ", ".join(items)
