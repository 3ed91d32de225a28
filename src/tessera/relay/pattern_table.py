"""Pattern tables: what a target kind offers to take from the graph.

A table is an ordered list of `PatternEntry`s; `MergeComposite` wraps each
match in a composite function named after the entry. The table lives with
the graph IR (not with the passes) because a `TargetKind` declares one, and
target kinds sit below the pass layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .dataflow_pattern import Pattern
from .expr import Expr

Check = Callable[[Expr], bool]  # receives the composite's body: just the matched calls


@dataclass(frozen=True)
class PatternEntry:
    """One named pattern ("<kind>.<name>") and an optional check of a match."""

    name: str
    pattern: Pattern
    check: Check | None = None


PatternTable = Sequence[PatternEntry]


def as_entries(table: Sequence[PatternEntry | tuple]) -> list[PatternEntry]:
    return [e if isinstance(e, PatternEntry) else PatternEntry(*e) for e in table]
