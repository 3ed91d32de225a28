"""What the memory planner did: figures as text, and the pools over time as an SVG chart.

    report = memory_report(lib)        # an AotLibrary or a graph-executor library
    report = memory_report(lib, int8_bound=int8_activation_bound(mod, params))   # int8 models: beside the bound
    print(report.text())
    Path("memory.svg").write_text(report.svg())

`memory_report` copies what the chart needs out of the lowered program
(kernel names per step, the piece of each step in a named compilation, which
tensors share each buffer) into plain frozen values, so the report is the
same for the AOT and the graph executor and does not keep the program alive.
The drawing is `memory_chart.py`'s job.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from ..tir.stmt import PrimFunc
from .memory_plan import BufferInfo, PoolPlan, lower_bound, peak_step
from .program import Role, Step
from .program_memory import ProgramMemory
from .target_hooks import DEVICE_ATTR

MAX_LISTED = 4  # tensors named at a peak; the rest are counted


class BufferKind(enum.Enum):
    """What a planned buffer holds, the chart's legend."""

    RESULT = "result tensor"
    SCRATCH = "scratch (kernel workspace)"
    IN_PLACE = "in-place reuse (tensors sharing one buffer)"
    CONCATENATION = "concatenation (its parts computed in it)"


@dataclass(frozen=True)
class HeldTensor:
    """A tensor living in a planned buffer, and the step whose kernel makes it."""

    name: str
    step: int
    scratch: bool


@dataclass(frozen=True)
class ChartBuffer:
    """One rectangle of the chart: a buffer's bytes over its lifetime (in ticks) in its pool."""

    name: str
    size: int
    offset: int
    start: int
    end: int
    kind: BufferKind
    tensors: tuple[HeldTensor, ...]
    touched_by: tuple[int, ...] = ()  # the steps whose kernels read or write it


@dataclass(frozen=True)
class Peak:
    """Where a pool's live total is largest: the tick, its step, the bytes and the buffers alive there."""

    tick: int
    step: int
    bytes: int
    alive: tuple[ChartBuffer, ...]  # largest first


@dataclass(frozen=True)
class Lane:
    """One pool of the plan."""

    pool: str
    size: int
    limit: int | None
    lower_bound: int
    algorithm: str
    buffers: tuple[ChartBuffer, ...]
    peak: Peak | None  # None: the pool holds nothing


@dataclass(frozen=True)
class MemoryReport:
    memory: ProgramMemory
    order: str  # the operator-order strategy that won
    kernels: tuple[str, ...]  # the kernel of each step, in execution order
    pieces: tuple[str, ...]  # the piece running each step in a named compilation; empty otherwise
    lanes: tuple[Lane, ...]
    int8_bound: int = 0  # the model's int8 activation bound (backend/int8_bound.py); 0: not an int8 model

    @property
    def steps(self) -> int:
        return len(self.kernels)

    @property
    def ticks_per_step(self) -> int:
        return self.memory.ticks_per_step

    def step_of(self, tick: int) -> int:
        return min(tick // self.ticks_per_step, max(self.steps - 1, 0))

    def piece_peaks(self) -> dict[str, tuple[int, int]]:
        """Per piece (named compilation): its steps and the peak of the buffers its kernels touch."""
        if not self.pieces:
            return {}
        touched: dict[str, list[BufferInfo]] = {}
        steps: dict[str, int] = {}
        for piece in self.pieces:
            steps[piece] = steps.get(piece, 0) + 1
        for lane in self.lanes:
            for b in lane.buffers:
                for piece in dict.fromkeys(self.pieces[k] for k in b.touched_by):
                    touched.setdefault(piece, []).append(BufferInfo(b.name, b.size, b.start, b.end))
        return {p: (steps[p], lower_bound(touched.get(p, []))) for p in steps}

    def text(self) -> str:
        m = self.memory
        lines = [
            f"memory: {m.total} bytes in {len(m.pools)} pool(s); lower bound {m.lower_bound} bytes "
            f"(ratio {m.total / max(m.lower_bound, 1):.3f}) for the executed order ({self.order}, {self.steps} steps)",
            f"  lower bound of the file's own order (whole-step lifetimes, no sharing): {m.file_order_bound} bytes; "
            f"with the same rules: {m.file_order_same_rules} bytes",
            f"  buffers: {len(m.buffers)}; shared in place: {m.inplace}; concatenations computed in place: {m.views}",
        ]
        for p, lane in zip(m.pools, self.lanes):
            limit = f" of {p.spec.size_bytes}" if p.spec.size_bytes is not None else ""
            lines.append(f"  pool {p.name}: {p.size}{limit} bytes, {len(p.plan.buffers)} buffers, "
                         f"planner {p.plan.algorithm}, lower bound {p.plan.lower_bound}")
            if lane.peak is not None:
                lines.append(f"    peak {lane.peak.bytes} bytes at step {lane.peak.step} "
                             f"({self.kernels[lane.peak.step]}): {alive_listing(lane.peak)}")
        for piece, (count, peak) in self.piece_peaks().items():
            lines.append(f"  piece {piece}: {count} steps, peak of the buffers its kernels touch {peak} bytes")
        if self.int8_bound:
            lines.append(f"  int8 activation bound: {self.int8_bound} bytes (the largest layer's int8 input(s) + "
                         f"output); pools {m.total} bytes = {m.total / self.int8_bound:.3f} x the bound")
        return "\n".join(lines)

    def svg(self, title: str = "tessera memory plan") -> str:
        from .memory_chart import render_svg

        return render_svg(self, title)


def human_bytes(n: float) -> str:
    """`n` bytes in B, KiB, MiB or GiB, three significant digits at most."""
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} GiB"


def alive_listing(peak: Peak) -> str:
    """The largest tensors alive at a peak, with their sizes; the rest counted."""
    parts = [f"{'+'.join(t.name for t in b.tensors)} {human_bytes(b.size)}" for b in peak.alive[:MAX_LISTED]]
    rest = peak.alive[MAX_LISTED:]
    if rest:
        parts.append(f"{len(rest)} more ({human_bytes(sum(b.size for b in rest))})")
    return ", ".join(parts) if parts else "nothing"


@dataclass(frozen=True)
class _Holdings:
    tensors: tuple[HeldTensor, ...]  # in the order they are made
    steps: tuple[int, ...]  # every step touching one of them
    concatenation: bool = False  # a concatenation's result, its parts computed in it (a view step makes it)


def _holdings(steps: Sequence[Step]) -> dict[str, _Holdings]:
    """Buffer name -> the tensors living in it and the steps using it."""
    held: dict[str, dict[str, HeldTensor]] = {}
    users: dict[str, dict[int, None]] = {}
    concatenations: set[str] = set()
    for k, s in enumerate(steps):
        for a, t in enumerate(s.args):
            if t.role not in (Role.INTERMEDIATE, Role.WORKSPACE):
                continue
            owner = t.buffer_owner.name
            users.setdefault(owner, {})[k] = None
            if a >= s.num_inputs:
                held.setdefault(owner, {}).setdefault(t.name, HeldTensor(t.name, k, t.role is Role.WORKSPACE))
                if s.view:
                    concatenations.add(owner)
    return {name: _Holdings(tuple(ts.values()), tuple(users[name]),
                            name in concatenations) for name, ts in held.items()}


def _kind(held: _Holdings) -> BufferKind:
    tensors = held.tensors
    if held.concatenation:
        return BufferKind.CONCATENATION
    if len(tensors) > 1:
        return BufferKind.IN_PLACE
    return BufferKind.SCRATCH if tensors and tensors[0].scratch else BufferKind.RESULT


def _lane(pool: PoolPlan, held: dict[str, _Holdings], ticks_per_step: int, steps: int) -> Lane:
    plan = pool.plan
    none = _Holdings((), ())
    buffers = tuple(ChartBuffer(b.name, b.size, plan.offsets[b.name], b.start, b.end,
                                _kind(held.get(b.name, none)), held.get(b.name, none).tensors,
                                held.get(b.name, none).steps)
                    for b in sorted(plan.buffers, key=lambda b: (b.start, plan.offsets[b.name], b.name)))
    peak = None
    if buffers:
        tick = peak_step(plan.buffers)
        alive = sorted((b for b in buffers if b.start <= tick <= b.end), key=lambda b: (-b.size, b.name))
        peak = Peak(tick, min(tick // ticks_per_step, max(steps - 1, 0)), sum(b.size for b in alive), tuple(alive))
    return Lane(pool.name, pool.size, pool.spec.size_bytes, plan.lower_bound, plan.algorithm, buffers, peak)


def build_report(memory: ProgramMemory, order: str, steps: Sequence[Step], kernels: dict[str, PrimFunc],
                 int8_bound: int = 0) -> MemoryReport:
    """The report of a planned program (its steps in execution order and its kernels)."""
    pieces = tuple(str(kernels[s.kernel].attrs.get(DEVICE_ATTR) or "") if s.kernel in kernels else ""
                   for s in steps)
    if not any(pieces):
        pieces = ()
    held = _holdings(steps)
    lanes = tuple(_lane(p, held, memory.ticks_per_step, len(steps)) for p in memory.pools)
    return MemoryReport(memory, order, tuple(s.kernel for s in steps), pieces, lanes, int8_bound)


def memory_report(lib: object, int8_bound: int = 0) -> MemoryReport:
    """The report of a built library (AOT: `lib.program`; graph executor: `lib.graph_plan`).

    `int8_bound`: the model's int8 activation bound, printed beside the pools with their ratio to it."""
    program = getattr(lib, "program", None)
    if program is not None:
        return build_report(program.planned, program.order_strategy, program.steps, program.kernels, int8_bound)
    plan = getattr(lib, "graph_plan", None)
    if plan is None or plan.memory is None or plan.program is None:
        raise TypeError(f"no memory plan on {type(lib).__name__}; build it with tessera.build first")
    return build_report(plan.memory, plan.program.order_strategy, plan.program.steps, plan.program.kernels,
                        int8_bound)


__all__: Sequence[str] = ("BufferKind", "ChartBuffer", "HeldTensor", "Lane", "MemoryReport", "Peak", "build_report",
                          "human_bytes", "memory_report")
