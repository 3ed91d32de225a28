"""Static memory planning: place buffers with known lifetimes in one pool.

A buffer lives over an inclusive interval of execution steps; two buffers
conflict when their intervals overlap, and then they may not overlap in
memory. Planners assign byte offsets:

* greedy by size — largest buffer first, each at the lowest offset where it
  fits between the conflicting buffers already placed;
* greedy by conflicts — buffers with the most conflicts first, same rule;
* hill climbing — random swaps in the greedy order, kept when the pool
  shrinks (seeded, so plans are deterministic).

`plan_memory` runs them all and keeps the smallest pool. The figure of merit
is pool size over the lower bound: the largest total size of buffers alive
at one step, which no placement can beat.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

DEFAULT_ALIGNMENT = 16


@dataclass(frozen=True)
class BufferInfo:
    name: str
    size: int  # bytes
    start: int  # first step at which the buffer holds data
    end: int  # last step that reads it (inclusive)

    def conflicts(self, other: "BufferInfo") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class MemoryPlan:
    offsets: dict[str, int]
    pool_size: int
    algorithm: str
    lower_bound: int = 0
    buffers: list[BufferInfo] = field(default_factory=list)

    def check(self) -> None:
        """Raise if two buffers alive at once overlap in memory."""
        placed = [(b, self.offsets[b.name]) for b in self.buffers]
        for i, (a, oa) in enumerate(placed):
            if oa < 0 or oa + a.size > self.pool_size:
                raise AssertionError(f"{a.name} [{oa}, {oa + a.size}) outside the pool of {self.pool_size}")
            for b, ob in placed[i + 1:]:
                if a.conflicts(b) and oa < ob + b.size and ob < oa + a.size:
                    raise AssertionError(f"{a.name} and {b.name} are alive together and overlap")


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def lower_bound(buffers: Sequence[BufferInfo], alignment: int = 1) -> int:
    """The largest total size of buffers alive at the same step."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + align_up(b.size, alignment)
        events[b.end + 1] = events.get(b.end + 1, 0) - align_up(b.size, alignment)
    best = live = 0
    for step in sorted(events):
        live += events[step]
        best = max(best, live)
    return best


def _place(order: Sequence[BufferInfo], alignment: int) -> tuple[dict[str, int], int]:
    """First fit in the given order."""
    offsets: dict[str, int] = {}
    placed: list[tuple[int, int, BufferInfo]] = []
    top = 0
    for buf in order:
        size = align_up(max(buf.size, 1), alignment)
        busy = sorted((o, o + s) for o, s, other in placed if other.conflicts(buf))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, align_up(hi, alignment))
        offsets[buf.name] = offset
        placed.append((offset, size, buf))
        top = max(top, offset + size)
    return offsets, top


def greedy_by_size(buffers: Sequence[BufferInfo], alignment: int) -> list[BufferInfo]:
    return sorted(buffers, key=lambda b: (-b.size, b.start, b.name))


def greedy_by_conflicts(buffers: Sequence[BufferInfo], alignment: int) -> list[BufferInfo]:
    degree = {b.name: sum(1 for o in buffers if o is not b and o.conflicts(b)) for b in buffers}
    return sorted(buffers, key=lambda b: (-degree[b.name], -b.size, b.name))


Ordering = Callable[[Sequence[BufferInfo], int], list[BufferInfo]]
ORDERINGS: dict[str, Ordering] = {"greedy_by_size": greedy_by_size, "greedy_by_conflicts": greedy_by_conflicts}


def hill_climb(buffers: Sequence[BufferInfo], alignment: int, start: list[BufferInfo],
               iterations: int = 200, seed: int = 0) -> tuple[list[BufferInfo], int]:
    rng = random.Random(seed)
    order = list(start)
    _, best = _place(order, alignment)
    if len(order) < 2:
        return order, best
    for _ in range(iterations):
        i, j = rng.randrange(len(order)), rng.randrange(len(order))
        if i == j:
            continue
        order[i], order[j] = order[j], order[i]
        _, size = _place(order, alignment)
        if size <= best:
            best = size
        else:
            order[i], order[j] = order[j], order[i]
    return order, best


def plan_memory(buffers: Sequence[BufferInfo], alignment: int = DEFAULT_ALIGNMENT,
                hill_climb_iterations: int = 200) -> MemoryPlan:
    """The smallest plan any planner finds (ties go to the earlier planner)."""
    buffers = list(buffers)
    bound = lower_bound(buffers, alignment)
    best: MemoryPlan | None = None
    for name, ordering in ORDERINGS.items():
        order = ordering(buffers, alignment)
        offsets, size = _place(order, alignment)
        if best is None or size < best.pool_size:
            best = MemoryPlan(offsets, size, name, bound, buffers)
        if best.pool_size == bound:
            break
    assert best is not None
    if best.pool_size > bound and hill_climb_iterations and buffers:
        start = ORDERINGS[best.algorithm](buffers, alignment)
        order, size = hill_climb(buffers, alignment, start, hill_climb_iterations)
        if size < best.pool_size:
            offsets, size = _place(order, alignment)
            best = MemoryPlan(offsets, size, "hill_climb", bound, buffers)
    return best
