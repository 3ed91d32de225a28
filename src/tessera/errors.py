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


class RuntimeExecutionError(TesseraError):
    """A compiled module was given inputs it cannot run with."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix for a misspelt name, or ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def format_choices(choices: Iterable[str], limit: int = 0) -> str:
    """Sorted, comma-separated choices, optionally cut after `limit` items."""
    items = sorted(set(choices))
    if limit and len(items) > limit:
        return ", ".join(items[:limit]) + f", ... ({len(items)} in all)"
    return ", ".join(items)
