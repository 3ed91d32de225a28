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

`plan_pools` spreads buffers over several named pools with size limits and
the targets allowed to access them (say a fast 256 KiB SRAM, then a large
DRAM): every buffer starts in the first pool its kernels may use; while a
pool overflows, the largest buffer alive at its peak moves on to the next
allowed pool. A model that fits nowhere fails with the pool, the sizes and
the tensors alive at the peak.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..codegen.names import MAX_IDENTIFIER, is_safe_identifier
from ..errors import CompileError

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


Neighbours = dict[int, list[int]]  # id(buffer) -> ids of the buffers alive at a step it is alive


def conflict_lists(buffers: Sequence[BufferInfo]) -> Neighbours:
    """Every buffer's conflicting buffers, by a sweep over start steps: O(n log n + conflicts), not all pairs
    (testing every pair made memory planning the slowest part of a DenseNet build)."""
    found: Neighbours = {id(b): [] for b in buffers}
    alive: list[BufferInfo] = []
    for buf in sorted(buffers, key=lambda b: b.start):
        alive = [a for a in alive if a.end >= buf.start]
        for other in alive:  # started no later than buf and still alive when it starts
            found[id(other)].append(id(buf))
            found[id(buf)].append(id(other))
        alive.append(buf)
    return found


def _place(order: Sequence[BufferInfo], alignment: int, neighbours: Neighbours | None = None,
           limit: int | None = None) -> tuple[dict[str, int], int]:
    """First fit in the given order; stops early (offsets incomplete) once the pool outgrows `limit`."""
    neighbours = conflict_lists(order) if neighbours is None else neighbours
    offsets: dict[str, int] = {}
    placed: dict[int, tuple[int, int]] = {}  # id(buffer) -> (offset, end)
    top = 0
    for buf in order:
        size = align_up(max(buf.size, 1), alignment)
        busy = sorted([placed[other] for other in neighbours[id(buf)] if other in placed])
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, align_up(hi, alignment))
        offsets[buf.name] = offset
        placed[id(buf)] = (offset, offset + size)
        top = max(top, offset + size)
        if limit is not None and top > limit:
            break
    return offsets, top


def greedy_by_size(buffers: Sequence[BufferInfo], alignment: int) -> list[BufferInfo]:
    return sorted(buffers, key=lambda b: (-b.size, b.start, b.name))


def greedy_by_conflicts(buffers: Sequence[BufferInfo], alignment: int) -> list[BufferInfo]:
    neighbours = conflict_lists(buffers)
    return sorted(buffers, key=lambda b: (-len(neighbours[id(b)]), -b.size, b.name))


Ordering = Callable[[Sequence[BufferInfo], int], list[BufferInfo]]
ORDERINGS: dict[str, Ordering] = {"greedy_by_size": greedy_by_size, "greedy_by_conflicts": greedy_by_conflicts}


def hill_climb(buffers: Sequence[BufferInfo], alignment: int, start: list[BufferInfo],
               iterations: int = 200, seed: int = 0) -> tuple[list[BufferInfo], int]:
    rng = random.Random(seed)
    order = list(start)
    neighbours = conflict_lists(order)
    _, best = _place(order, alignment, neighbours)
    if len(order) < 2:
        return order, best
    for _ in range(iterations):
        i, j = rng.randrange(len(order)), rng.randrange(len(order))
        if i == j:
            continue
        order[i], order[j] = order[j], order[i]
        _, size = _place(order, alignment, neighbours, limit=best)  # a worse order is known early
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
    neighbours = conflict_lists(buffers)
    best: MemoryPlan | None = None
    for name, ordering in ORDERINGS.items():
        order = ordering(buffers, alignment)
        offsets, size = _place(order, alignment, neighbours)
        if best is None or size < best.pool_size:
            best = MemoryPlan(offsets, size, name, bound, buffers)
        if best.pool_size == bound:
            break
    assert best is not None
    if best.pool_size > bound and hill_climb_iterations and buffers:
        start = ORDERINGS[best.algorithm](buffers, alignment)
        order, size = hill_climb(buffers, alignment, start, hill_climb_iterations)
        if size < best.pool_size:
            offsets, size = _place(order, alignment, neighbours)
            best = MemoryPlan(offsets, size, "hill_climb", bound, buffers)
    return best


def plan_sequential(buffers: Sequence[BufferInfo], alignment: int = DEFAULT_ALIGNMENT) -> MemoryPlan:
    """No reuse: every buffer its own bytes (the reference that planned runs are checked against)."""
    offsets: dict[str, int] = {}
    top = 0
    for b in buffers:
        offsets[b.name] = top
        top += align_up(max(b.size, 1), alignment)
    return MemoryPlan(offsets, top, "sequential", lower_bound(buffers, alignment), list(buffers))


def peak_step(buffers: Sequence[BufferInfo], alignment: int = 1) -> int:
    """A step at which the total of live buffers is largest (the earliest such)."""
    best_step, best, live = 0, -1, 0
    events: dict[int, int] = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + align_up(b.size, alignment)
        events[b.end + 1] = events.get(b.end + 1, 0) - align_up(b.size, alignment)
    for step in sorted(events):
        live += events[step]
        if live > best:
            best_step, best = step, live
    return best_step


def alive_at(buffers: Sequence[BufferInfo], step: int) -> list[BufferInfo]:
    return [b for b in buffers if b.start <= step <= b.end]


@dataclass(frozen=True)
class PoolSpec:
    """A memory the model may use: a name, an optional size limit, the target kinds that reach it."""

    name: str
    size_bytes: int | None = None  # None: no limit
    targets: tuple[str, ...] = ()  # target kinds (or pieces of a named compilation) that reach it; empty: all

    def __post_init__(self) -> None:
        if not is_safe_identifier(self.name):  # it names a struct field and macros in the AOT header
            raise CompileError(
                f"pool name {self.name!r} must be an ASCII C identifier of at most {MAX_IDENTIFIER} characters "
                "that is not a C or C++ keyword, a standard C macro, nor reserved (a leading _ with a capital "
                "or a second _; ts_, tsgen_, tessera_)"
            )
        if self.size_bytes is not None and self.size_bytes < 0:
            raise CompileError(f"pool {self.name}: size_bytes must be >= 0, got {self.size_bytes}")
        object.__setattr__(self, "targets", tuple(self.targets))

    def allows(self, kinds: frozenset[str]) -> bool:
        return not self.targets or kinds <= set(self.targets)


@dataclass
class PoolPlan:
    spec: PoolSpec
    plan: MemoryPlan

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def size(self) -> int:
        return self.plan.pool_size


class PoolOverflowError(CompileError):
    """The buffers do not fit the pools they may use; `time` is the peak's."""

    def __init__(self, message: str, time: int = 0) -> None:
        super().__init__(message)
        self.time = time


def _overflow(pool: PoolSpec, plan: MemoryPlan, alignment: int) -> PoolOverflowError:
    time = peak_step(plan.buffers, alignment)
    alive = sorted(alive_at(plan.buffers, time), key=lambda b: (-b.size, b.name))
    listing = ", ".join(f"{b.name} ({b.size} B, alive {b.start}-{b.end})" for b in alive[:12])
    more = f" and {len(alive) - 12} more" if len(alive) > 12 else ""
    return PoolOverflowError(f"pool {pool.name!r} overflows: planned {plan.pool_size} bytes (lower bound "
                             f"{plan.lower_bound}), limit {pool.size_bytes} bytes; alive at the peak (time {time}): "
                             f"{listing}{more}", time)


def plan_pools(buffers: Sequence[BufferInfo], pools: Sequence[PoolSpec], access: dict[str, frozenset[str]],
               alignment: int = DEFAULT_ALIGNMENT, hill_climb_iterations: int = 200) -> list[PoolPlan]:
    """Place `buffers` in `pools` (fast ones first); `access[name]` = target kinds touching the buffer."""
    if not pools:
        raise CompileError("plan_pools needs at least one pool")
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise CompileError(f"pool names must be unique, got {names}")
    allowed: dict[str, list[int]] = {}
    for b in buffers:
        kinds = access.get(b.name, frozenset())
        allowed[b.name] = [k for k, p in enumerate(pools) if p.allows(kinds)]
        if not allowed[b.name]:
            raise CompileError(f"no pool may hold {b.name} ({b.size} B): it is used by targets {sorted(kinds)}, "
                               f"pools allow {[(p.name, list(p.targets) or 'any') for p in pools]}")
    where = {b.name: allowed[b.name][0] for b in buffers}
    result: list[PoolPlan] = []
    for k, pool in enumerate(pools):
        while True:
            mine = [b for b in buffers if where[b.name] == k]
            plan = plan_memory(mine, alignment, hill_climb_iterations)
            if pool.size_bytes is None or plan.pool_size <= pool.size_bytes:
                break
            step = peak_step(mine, alignment) if plan.lower_bound > pool.size_bytes else _top_step(plan)
            movable = [b for b in alive_at(mine, step) if any(j > k for j in allowed[b.name])]
            if not movable:
                raise _overflow(pool, plan, alignment)
            victim = max(movable, key=lambda b: (b.size, b.end - b.start, b.name))
            where[victim.name] = next(j for j in allowed[victim.name] if j > k)
        result.append(PoolPlan(pool, plan))
    return result


def _top_step(plan: MemoryPlan) -> int:
    """A step of the buffer that reaches the top of the pool, where the live total is largest."""
    top = max(plan.buffers, key=lambda b: (plan.offsets[b.name] + b.size, b.name))
    return max(range(top.start, top.end + 1), key=lambda s: (sum(b.size for b in alive_at(plan.buffers, s)), -s))
