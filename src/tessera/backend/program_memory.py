"""Memory for the lowered program: liveness, sharing in place, and placement in the pools.

`plan_program_memory` computes liveness over the steps of a `Program`
(`program.py`), lets an elementwise kernel's output share its input's buffer
when the input dies there (`inplace.py`), and places every buffer in the
pools. The graph executor and the AOT executor both use it, so their plans
are the same. `with_aliasing` then drops `restrict` from kernel parameters
that the plan lets overlap.

C's `restrict` on a parameter promises that memory written during the call
is reached through that parameter alone, for the whole call. The plan
breaks that promise in two ways, and only on the pair concerned: an output
shares its input in place (the residual add of a fused epilogue), or a
kernel's stage dies before a later one is born and the two take the same
bytes (a convolution's planes copy, then its output). The second is as much
a broken promise as the first, even though no statement touches both, and
gcc 12 ignores `restrict` on pointers declared in a block, so the drop is
per parameter. Measured on AMD EPYC (Zen 4), 1 thread: with the planner's
sharing, gcc keeps such loops vectorised behind a run-time overlap check;
forcing `restrict` back everywhere bought nothing measurable and made
vww_mobilenet 17% slower (gcc then vectorised a 6x6 depthwise kernel's
narrow planes copy along its rows: 4.4 us became 12.9 us).
Planning the kernel's arguments apart instead would grow the pool 1.9x on
mobilenet_v2_block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CompileError
from ..relay.module import IRModule
from ..tir.stmt import MAY_ALIAS_ATTR, PrimFunc
from .inplace import inplace_pairs, kernel_spans, scratch_in_outputs
from .lift_workspace import workspace_params
from .memory_plan import (DEFAULT_ALIGNMENT, BufferInfo, PoolOverflowError, PoolPlan, PoolSpec, lower_bound, plan_pools,
                          plan_sequential)
from .concat_views import ConcatView, concat_views, place, step_kind
from .program import ORDERS, POOLED, Program, Role, Step, Tensor, number_steps

MEMORY_CONFIG = "memory"  # PassContext.config key holding a MemoryOptions


@dataclass(frozen=True)
class MemoryOptions:
    """How memory is planned. Pass as `PassContext(config={"memory": MemoryOptions(...)})`."""

    order: str = "memory"  # "memory": the order with the lowest peak; "file": the graph's own order
    inplace: bool = True  # elementwise outputs may overwrite inputs that die there
    reuse: bool = True  # False: no buffer shares memory with another (reference runs)
    pools: tuple[PoolSpec, ...] = ()  # empty: one unlimited pool named "pool"
    alignment: int = DEFAULT_ALIGNMENT
    hill_climb_iterations: int = 200
    concat_views: bool = True  # parts of a concatenation computed in its result (concat_views.py), with reuse

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise CompileError(f"memory order {self.order!r} unknown; valid: {', '.join(ORDERS)}")
        object.__setattr__(self, "pools", tuple(self.pools))
        seen: dict[str, str] = {}
        for p in self.pools:
            # the AOT header spells pools in capitals too: TSGEN_<MODEL>_<POOL>_SIZE
            if p.name.lower() in ("params", "workspace"):
                raise CompileError(f"pool name {p.name!r} is reserved (params, workspace, in any case)")
            if p.name.upper() in seen:
                raise CompileError(f"pool names {seen[p.name.upper()]!r} and {p.name!r} differ only in case; "
                                   "the header's macros would clash")
            seen[p.name.upper()] = p.name

    @staticmethod
    def from_config(config: object) -> "MemoryOptions":
        value = getattr(config, "get", lambda k, d=None: d)(MEMORY_CONFIG)
        if value is None:
            return MemoryOptions()
        if not isinstance(value, MemoryOptions):
            raise CompileError(f"PassContext config {MEMORY_CONFIG!r}: got {type(value).__name__}, "
                               "expected tessera.backend.program_memory.MemoryOptions")
        return value


DEFAULT_POOL = PoolSpec("pool")


@dataclass
class ProgramMemory:
    """Where every pooled tensor lives, and the figures that judge it."""

    pools: list[PoolPlan]
    buffers: list[BufferInfo]  # one per buffer (tensors sharing in place count once)
    owners: dict[str, str] = field(default_factory=dict)  # tensor name -> buffer name
    lower_bound: int = 0  # largest total of buffers alive at once, in the executed order
    file_order_bound: int = 0  # the naive bound: the graph's own order, whole-step lifetimes, no sharing
    inplace: int = 0  # outputs that share their input's buffer, scratch living in outputs
    file_order_same_rules: int = 0  # the graph's own order with the executed order's liveness rules
    ticks_per_step: int = 1  # buffer lifetimes count ticks: step k is ticks [k * this, (k + 1) * this)
    views: int = 0  # concatenations whose parts are computed in their result (no copy runs)

    @property
    def total(self) -> int:
        return sum(p.size for p in self.pools)

    def pool(self, name: str) -> PoolPlan:
        return next(p for p in self.pools if p.name == name)


def _kinds(program: Program, host_kind: str) -> dict[int, set[str]]:
    """Who touches each tensor: the named piece of each kernel in a named compilation, else its target kind."""
    kinds: dict[int, set[str]] = {}
    for s in program.steps:
        kind = step_kind(program, s, host_kind)
        for t in s.args:
            kinds.setdefault(id(t.buffer_owner), set()).add(kind)
    return kinds


def ticks_per_step(program: Program) -> int:
    """Ticks of one step: the most top-level statements of any kernel (see `_buffers`)."""
    return max([kernel_spans(f)[0] for f in program.kernels.values()] + [1])


def share_in_place(program: Program, placed: frozenset[int] = frozenset()) -> int:
    """Let outputs overwrite inputs that die at their step (elementwise kernels), and kernel
    scratch live in an output it is read into element by element; returns how many share.
    `placed`: the ids of concatenation results holding parts (concat_views.py), whose memory
    outlives any one part, so no output takes a part's or theirs."""
    cache: dict[str, tuple[dict[int, int], dict[int, int]]] = {}
    count = 0
    for k, s in enumerate(program.steps):
        func = program.kernels.get(s.kernel)
        if func is None or s.view:
            continue
        if s.kernel not in cache:
            scratch = workspace_params(func)
            cache[s.kernel] = (inplace_pairs(func), scratch_in_outputs(func, scratch))
        from_inputs, into_outputs = cache[s.kernel]
        donated: set[int] = set()
        hosts: set[int] = set()  # outputs already holding something else
        for o_index, i_index in from_inputs.items():
            src, dst = s.args[i_index], s.args[o_index]
            owner = src.buffer_owner
            if (src.role is Role.INTERMEDIATE and dst.role is Role.INTERMEDIATE and src.last_use == k
                    and id(owner) not in placed
                    and sum(a is src for a in s.args) == 1 and id(owner) not in donated
                    and src.nbytes == dst.nbytes and dst.shares is None):
                dst.shares = src
                donated.add(id(owner))
                hosts.add(o_index)
                count += 1
        for w_index, o_index in into_outputs.items():
            scratch_t, dst = s.args[w_index], s.args[o_index]
            if o_index in hosts or sum(a is dst for a in s.args) != 1 or scratch_t.nbytes != dst.nbytes:
                continue
            scratch_t.shares = dst
            hosts.add(o_index)
            count += 1
    return count


def _buffers(program: Program, inplace: bool, within_steps: bool = True, views: Sequence[ConcatView] = ()
             ) -> tuple[list[Tensor], list[BufferInfo], int]:
    """Liveness in the program's current order: (pooled tensors, one BufferInfo per buffer, in-place count).

    Times are ticks: step k covers ticks [k * W, (k + 1) * W), one per
    top-level statement of its kernel (`kernel_spans`). With
    `within_steps=False` every tensor a step touches is alive for all of it.
    `views` are placed first; a concatenation's buffer then lives from its
    first part's birth to the last use of it or any part.
    """
    number_steps(program)
    pooled = program.pooled()
    for t in pooled:
        t.shares, t.view_offset = None, 0
    for s in program.steps:
        s.view = False
    place(views)
    placed = frozenset(id(v.result.buffer_owner) for v in views)
    n_inplace = share_in_place(program, placed) if inplace else 0
    spans_of = {name: kernel_spans(f) for name, f in program.kernels.items()} if within_steps else {}
    width = max([n for n, _ in spans_of.values()] + [1])
    life: dict[int, list[int]] = {}  # tensor id -> [first tick, last tick]
    for k, s in enumerate(program.steps):
        _, spans = spans_of.get(s.kernel, (1, []))
        for a, t in enumerate(s.args):
            lo, hi = spans[a] if a < len(spans) else (0, width - 1)
            span = life.setdefault(id(t), [k * width + lo, k * width + hi])
            if a >= s.num_inputs:
                span[0] = min(span[0], k * width + lo)
            span[1] = max(span[1], k * width + hi)
    end = len(program.steps) * width
    for t in program.results:
        if program.pin_results and id(t) in life:
            life[id(t)][1] = end
    spans_by_owner: dict[int, list[int]] = {}
    for t in pooled:
        owner = t.buffer_owner
        if owner.role not in POOLED:
            continue  # lives in a model output
        lo, hi = life[id(t)]
        span = spans_by_owner.setdefault(id(owner), [lo, hi])
        span[0], span[1] = min(span[0], lo), max(span[1], hi)
    buffers = [BufferInfo(t.name, t.nbytes, *spans_by_owner[id(t)]) for t in pooled if t.shares is None]
    return pooled, buffers, n_inplace


def file_order_bound(program: Program, options: MemoryOptions, naive: bool = True,
                     views: Sequence[ConcatView] = ()) -> int:
    """The lower bound (largest total alive at once) if the kernels ran in the graph's own order.

    `naive`: as a planner without this module's liveness would see it, every
    tensor a step touches alive for the whole step and no sharing in place;
    otherwise with the same liveness rules as the executed order.
    """
    executed = program.steps
    program.steps = sorted(executed, key=lambda s: s.file_index)
    try:
        sharing = options.inplace and options.reuse and not naive
        _, buffers, _ = _buffers(program, sharing, within_steps=not naive, views=() if naive else views)
        return lower_bound(buffers, options.alignment)
    finally:
        program.steps = executed
        number_steps(program)


def _views_within_peak(program: Program, options: MemoryOptions, views: list[ConcatView]) -> list[ConcatView]:
    """`views`, or as many of them (in order) as keep the lowest possible pool no larger than without:
    a concatenation's buffer is born with its first part, which may be early (an Inception branch's
    other intermediates then live beside it)."""
    inplace = options.inplace and options.reuse

    def bound(chosen: Sequence[ConcatView]) -> int:
        return lower_bound(_buffers(program, inplace, views=chosen)[1], options.alignment)

    if not views:
        return views
    without = bound(())
    if bound(views) <= without:
        return views
    kept: list[ConcatView] = []
    for v in views:
        if bound([*kept, v]) <= without:
            kept.append(v)
    return kept


def plan_program_memory(program: Program, options: MemoryOptions, host_kind: str = "c") -> ProgramMemory:
    views = (_views_within_peak(program, options, concat_views(program, host_kind, options.alignment))
             if options.reuse and options.concat_views else [])
    file_bound = file_order_bound(program, options, naive=True)
    file_same_rules = file_order_bound(program, options, naive=False, views=views)
    pooled, buffers, n_inplace = _buffers(program, options.inplace and options.reuse, views=views)
    by_name = {t.name: t for t in pooled}
    kinds = _kinds(program, host_kind)
    access = {b.name: frozenset(kinds.get(id(by_name[b.name]), set())) for b in buffers}
    pools = list(options.pools) or [DEFAULT_POOL]
    if options.reuse:
        try:
            plans = plan_pools(buffers, pools, access, options.alignment, options.hill_climb_iterations)
        except PoolOverflowError as err:
            width = ticks_per_step(program)
            step = min(err.time // width, len(program.steps) - 1)
            raise PoolOverflowError(f"{err} -- the peak is in step {step}, kernel {program.steps[step].kernel} "
                                    f"(times count each kernel's top-level statements, {width} per step)",
                                    err.time) from None
    else:
        plans = [PoolPlan(pools[0], plan_sequential(buffers, options.alignment))]
    where: dict[str, tuple[str, int]] = {}
    for p in plans:
        for name, offset in p.plan.offsets.items():
            where[name] = (p.name, offset)
    for t in pooled:
        pool, start = where.get(t.buffer_owner.name, ("", 0))
        t.pool, t.offset = pool, start + t.offset_in_owner
    return ProgramMemory(plans, buffers, {t.name: t.buffer_owner.name for t in pooled},
                         lower_bound(buffers, options.alignment), file_bound, n_inplace, file_same_rules,
                         ticks_per_step(program), len(views))


def overlapping_params(steps: Sequence[Step], kernels: dict[str, PrimFunc]) -> dict[str, frozenset[int]]:
    """Per kernel, the parameters that some call passes memory overlapping another argument's, where the
    kernel may write one of the two.

    The planner overlaps arguments of one call when they share in place or
    when one is dead before the other is born inside the kernel; those
    parameters must not be declared `restrict`. Two inputs may overlap and
    stay `restrict`: the promise only concerns memory the call modifies.
    """
    marks: dict[str, set[int]] = {}
    for s in steps:
        if s.kernel not in kernels or s.view:
            continue  # (a view's arguments overlap by design, and it is not called)
        read_only = kernels[s.kernel].num_inputs  # parameters before this one are `const`
        ranges: list[tuple[int, int, tuple[str, str | int], int, int]] = []  # (argument, tensor, memory, start, end)
        for a, t in enumerate(s.args):
            owner = t.buffer_owner
            if owner.role in POOLED:
                ranges.append((a, id(t), ("pool", t.pool), t.offset, t.offset + t.nbytes))
            else:
                ranges.append((a, id(t), ("tensor", id(owner)), t.offset_in_owner, t.offset_in_owner + t.nbytes))
        for i, (a, ta, ka, lo, hi) in enumerate(ranges):
            for b, tb, kb, lo2, hi2 in ranges[i + 1:]:
                if ta != tb and ka == kb and lo < hi2 and lo2 < hi and b >= read_only:
                    marks.setdefault(s.kernel, set()).update((a, b))
    return {k: frozenset(v) for k, v in marks.items()}


def with_aliasing(mod: IRModule, steps: Sequence[Step], kernels: dict[str, PrimFunc]) -> IRModule:
    """`mod` (and `kernels`, updated in place) with `MAY_ALIAS_ATTR` on kernels whose arguments overlap."""
    marks = overlapping_params(steps, kernels)
    result = mod
    for gv, func in mod.items():
        if isinstance(func, PrimFunc) and func.name in marks:
            new = func.with_attrs(**{MAY_ALIAS_ATTR: marks[func.name]})
            result = result.with_function(gv, new)
            kernels[func.name] = new
    return result


def liveness_peak(program: Program, alignment: int = 1) -> int:
    """Largest total of pooled tensors alive at once in the program's order (no sharing)."""
    return lower_bound([BufferInfo(t.name, t.nbytes, t.producer, max(t.last_use, t.producer))
                        for t in program.pooled()], alignment)


__all__: Sequence[str] = ("MEMORY_CONFIG", "MemoryOptions", "ProgramMemory", "file_order_bound", "liveness_peak",
                          "overlapping_params", "plan_program_memory", "share_in_place", "ticks_per_step",
                          "with_aliasing")
