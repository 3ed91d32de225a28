"""Pattern tables: what a target kind offers to take from the graph.

A table is an ordered list of `PatternEntry`s; `MergeComposite` wraps each
match in a composite function named after the entry. The table lives with
the graph IR (not with the passes) because a `TargetKind` declares one, and
target kinds sit below the pass layer.

An entry's check receives the `Match` and looks nodes up by the pattern
objects that matched them, with their types:

    CONV = is_op("nn.conv2d")(wildcard(), wildcard())
    RELU = is_op("nn.relu")(CONV)
    PatternEntry("lib.conv_relu", RELU, lambda m: m[CONV].attrs.groups == 1)

A check may say why it refused: `Refused("too small")` is false, and the
partition report shows its reason (see transform/declines.py).

An entry may also ask whether the host would run the match faster than the
accelerator: `host_faster(match, host)` gets the composite target's host
(a Target) and returns a `Refused` saying why, or None to let the
accelerator take it. Partitioning asks it only when it knows the host
(`build` always does), and not for a call pinned to the accelerator: so a
check says what the accelerator can run, `host_faster` where it pays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .dataflow_pattern import Match, Pattern


@dataclass(frozen=True, slots=True)
class Refused:
    """A check's "no", with the reason people see in the partition report."""

    reason: str

    def __bool__(self) -> bool:
        return False


Check = Callable[[Match], "bool | Refused"]  # `m[pattern]` is the (typed) expression a part of the pattern matched
# (match, host Target) -> why the host's own kernels are the better choice, or None (Any: targets sit above relay)
HostFaster = Callable[[Match, Any], "Refused | None"]


@dataclass(frozen=True)
class PatternEntry:
    """One named pattern ("<kind>.<name>"), an optional check of a match, and an optional comparison with
    the host's own kernels for it (`host_faster`)."""

    name: str
    pattern: Pattern
    check: Check | None = None
    host_faster: HostFaster | None = None


PatternTable = Sequence[PatternEntry]


def as_entries(table: Sequence[PatternEntry | tuple]) -> list[PatternEntry]:
    return [e if isinstance(e, PatternEntry) else PatternEntry(*e) for e in table]
