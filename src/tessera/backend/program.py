"""The lowered program both executors run: kernel calls, tensors, liveness, memory.

`extract_program(mod)` reads the top-level `main` of a lowered module (every
call is a kernel: a PrimFunc from the default lowering or from a `RelayToTIR`
hook, or for the graph executor an external function) and returns the calls
as `Step`s in the order chosen by `schedule.py`, with every tensor they touch:

* model inputs, parameters (weights), kernel results;
* kernel scratch — the trailing parameters `LiftWorkspaces` made of a
  kernel's global allocations — as a tensor alive during its step only.

`plan_program_memory` then computes liveness over the steps, lets an
elementwise kernel's output share its input's buffer when the input dies
there (`inplace.py`), and places every buffer in the pools. The graph
executor and the AOT executor both use it, so their plans are the same.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import CompileError
from ..relay.expr import Call, Constant, Function, GlobalVar, Tuple, TupleGetItem, Var
from ..relay.module import IRModule
from ..relay.ty import TensorType, flatten_tensor_types
from ..relay.visitor import post_order
from ..tir.stmt import PrimFunc
from .inplace import inplace_pairs, kernel_spans, scratch_in_outputs
from .lift_workspace import workspace_params
from .memory_plan import (DEFAULT_ALIGNMENT, BufferInfo, PoolOverflowError, PoolPlan, PoolSpec, lower_bound, plan_pools,
                          plan_sequential)
from .schedule import Graph, Node, STRATEGIES, best_order
from .target_hooks import DEVICE_ATTR, TARGET_ATTR

MEMORY_CONFIG = "memory"  # PassContext.config key holding a MemoryOptions


class Role(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"  # a model output (AOT: the caller's buffer)
    PARAM = "param"
    INTERMEDIATE = "intermediate"
    WORKSPACE = "workspace"  # a kernel's scratch, alive during its step


POOLED = (Role.INTERMEDIATE, Role.WORKSPACE)
ORDERS = ("memory", "file")


@dataclass(frozen=True)
class MemoryOptions:
    """How memory is planned. Pass as `PassContext(config={"memory": MemoryOptions(...)})`."""

    order: str = "memory"  # "memory": the order with the lowest peak; "file": the graph's own order
    inplace: bool = True  # elementwise outputs may overwrite inputs that die there
    reuse: bool = True  # False: no buffer shares memory with another (reference runs)
    pools: tuple[PoolSpec, ...] = ()  # empty: one unlimited pool named "pool"
    alignment: int = DEFAULT_ALIGNMENT
    hill_climb_iterations: int = 200

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
                               "expected tessera.backend.program.MemoryOptions")
        return value


DEFAULT_POOL = PoolSpec("pool")


@dataclass(eq=False)
class Tensor:
    name: str
    type: TensorType
    role: Role
    producer: int = -1  # step index, -1 for inputs and params
    last_use: int = -1
    offset: int = 0  # in its pool (intermediates, scratch) or the params blob (params)
    data: np.ndarray | None = None  # parameter values
    pool: str = ""  # the pool holding it
    shares: "Tensor | None" = None  # in-place: lives in this tensor's buffer

    @property
    def nbytes(self) -> int:
        return self.type.nbytes

    @property
    def buffer_owner(self) -> "Tensor":
        t = self
        while t.shares is not None:
            t = t.shares
        return t


@dataclass(eq=False)
class Step:
    kernel: str
    args: list[Tensor]  # inputs, outputs, then scratch
    num_inputs: int
    num_outputs: int = -1  # -1: every argument after the inputs
    file_index: int = -1  # position in the graph's own (depth-first) order

    def __post_init__(self) -> None:
        if self.num_outputs < 0:
            self.num_outputs = len(self.args) - self.num_inputs

    @property
    def inputs(self) -> list[Tensor]:
        return self.args[:self.num_inputs]

    @property
    def outputs(self) -> list[Tensor]:
        return self.args[self.num_inputs:self.num_inputs + self.num_outputs]

    @property
    def scratch(self) -> list[Tensor]:
        return self.args[self.num_inputs + self.num_outputs:]


@dataclass
class Program:
    inputs: list[Tensor]
    params: list[Tensor]
    steps: list[Step]
    kernels: dict[str, PrimFunc]
    results: list[Tensor]  # what main returns, in order
    order_strategy: str = "depth_first"
    pin_results: bool = False  # results stay alive to the end (the graph executor reads them after the run)

    def pooled(self) -> list[Tensor]:
        """Tensors that live in a pool: kernel results that are not model outputs, and scratch."""
        seen: dict[int, Tensor] = {}
        for s in self.steps:
            for t in s.args[s.num_inputs:]:
                if t.role in POOLED:
                    seen.setdefault(id(t), t)
        return list(seen.values())


def _tensor_type(ty: object, what: str) -> TensorType:
    if not isinstance(ty, TensorType):
        raise CompileError(f"{what} is not a tensor ({ty})")
    return ty


def extract_program(mod: IRModule, order: str = "memory", allow_external: bool = False,
                    results_in_pool: bool = False) -> Program:
    """Steps and tensors of `mod.main`, in the order `order` asks for (see `MemoryOptions.order`).

    `results_in_pool` says whether main's results count as pool memory when
    choosing the order (graph executor) or live in the caller's buffers (AOT).
    """
    main = mod.main
    tensors: dict[int, list[Tensor]] = {}
    inputs = []
    for p in main.params:
        t = Tensor(p.name_hint, _tensor_type(p.checked_type, f"input %{p.name_hint}"), Role.INPUT)
        inputs.append(t)
        tensors[id(p)] = [t]
    params: list[Tensor] = []
    steps: list[Step] = []
    kernels: dict[str, PrimFunc] = {}
    n_results = n_scratch = 0
    for node in post_order(main.body, into_functions=False):
        if id(node) in tensors or isinstance(node, (Var, GlobalVar, Function)):
            continue
        if isinstance(node, Constant):
            t = Tensor(f"p{len(params)}", node.checked_type, Role.PARAM, data=np.asarray(node.data))
            params.append(t)
            tensors[id(node)] = [t]
        elif isinstance(node, Tuple):
            tensors[id(node)] = [t for f in node.fields for t in tensors[id(f)]]
        elif isinstance(node, TupleGetItem):
            fields = node.tuple_value.checked_type.fields  # type: ignore[union-attr]
            start = sum(len(flatten_tensor_types(f)) for f in fields[:node.index])
            width = len(flatten_tensor_types(fields[node.index]))
            tensors[id(node)] = tensors[id(node.tuple_value)][start:start + width]
        elif isinstance(node, Call) and isinstance(node.op, GlobalVar):
            func = mod[node.op]
            scratch: list[Tensor] = []
            if isinstance(func, PrimFunc):
                kernels[func.name] = func
                for buf in workspace_params(func):
                    scratch.append(Tensor(f"ws{n_scratch}", TensorType(buf.shape, buf.dtype), Role.WORKSPACE))
                    n_scratch += 1
            elif not allow_external:
                raise CompileError(
                    f"AOT: @{node.op.name_hint} is not a compiled kernel (an external runtime module?); "
                    "the AOT executor calls C kernels only")
            args = [t for a in node.args for t in tensors[id(a)]]
            outs = [Tensor(f"t{n_results + k}", ty, Role.INTERMEDIATE)
                    for k, ty in enumerate(flatten_tensor_types(node.checked_type))]
            n_results += len(outs)
            steps.append(Step(func.name if isinstance(func, PrimFunc) else node.op.name_hint, args + outs + scratch, len(args), len(outs), len(steps)))
            tensors[id(node)] = outs
        else:
            raise CompileError(f"cannot execute {type(node).__name__} in main; was the module lowered first?")
    results = tensors[id(main.body)]
    program = Program(inputs, params, steps, kernels, results)
    graph = _schedule_graph(program, results_in_pool)
    if order == "memory":
        chosen, program.order_strategy = best_order(graph, tuple(STRATEGIES))
        program.steps = [steps[k] for k in chosen]
    _number(program)
    return program


def _schedule_graph(program: Program, results_in_pool: bool) -> Graph:
    results = {id(t) for t in program.results}
    sizes: dict[int, int] = {}
    nodes = []
    for s in program.steps:
        for t in s.outputs:
            sizes[id(t)] = t.nbytes if results_in_pool or id(t) not in results else 0
        nodes.append(Node(tuple(id(t) for t in s.inputs), tuple(id(t) for t in s.outputs),
                          sum(t.nbytes for t in s.scratch)))
    return Graph(tuple(nodes), sizes, frozenset(results))


def _number(program: Program) -> None:
    """Producer and last reader of every tensor, from the step order."""
    for k, s in enumerate(program.steps):
        for t in s.inputs:
            t.last_use = k
        for t in s.args[s.num_inputs:]:
            t.producer = t.last_use = k
    if program.pin_results:
        for t in program.results:
            if t.role is Role.INTERMEDIATE:
                t.last_use = len(program.steps)


# ---------------------------------------------------------------- planning
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

    @property
    def total(self) -> int:
        return sum(p.size for p in self.pools)

    def pool(self, name: str) -> PoolPlan:
        return next(p for p in self.pools if p.name == name)


def _kinds(program: Program, host_kind: str) -> dict[int, set[str]]:
    """Who touches each tensor: the named piece of each kernel in a named compilation, else its target kind."""
    kinds: dict[int, set[str]] = {}
    for s in program.steps:
        func = program.kernels.get(s.kernel)
        target = func.attrs.get(TARGET_ATTR) if func is not None else None
        piece = func.attrs.get(DEVICE_ATTR) if func is not None else None
        kind = piece or getattr(getattr(target, "kind", None), "name", host_kind)
        for t in s.args:
            kinds.setdefault(id(t.buffer_owner), set()).add(kind)
    return kinds


def share_in_place(program: Program) -> int:
    """Let outputs overwrite inputs that die at their step (elementwise kernels), and kernel
    scratch live in an output it is read into element by element; returns how many share."""
    cache: dict[str, tuple[dict[int, int], dict[int, int]]] = {}
    count = 0
    for k, s in enumerate(program.steps):
        func = program.kernels.get(s.kernel)
        if func is None:
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


def _buffers(program: Program, inplace: bool, within_steps: bool = True
             ) -> tuple[list[Tensor], list[BufferInfo], int]:
    """Liveness in the program's current order: (pooled tensors, one BufferInfo per buffer, in-place count).

    Times are ticks: step k covers ticks [k * W, (k + 1) * W), one per
    top-level statement of its kernel (`kernel_spans`). With
    `within_steps=False` every tensor a step touches is alive for all of it.
    """
    _number(program)
    pooled = program.pooled()
    for t in pooled:
        t.shares = None
    n_inplace = share_in_place(program) if inplace else 0
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


def file_order_bound(program: Program, options: MemoryOptions, naive: bool = True) -> int:
    """The lower bound (largest total alive at once) if the kernels ran in the graph's own order.

    `naive`: as a planner without this module's liveness would see it, every
    tensor a step touches alive for the whole step and no sharing in place;
    otherwise with the same liveness rules as the executed order.
    """
    executed = program.steps
    program.steps = sorted(executed, key=lambda s: s.file_index)
    try:
        sharing = options.inplace and options.reuse and not naive
        _, buffers, _ = _buffers(program, sharing, within_steps=not naive)
        return lower_bound(buffers, options.alignment)
    finally:
        program.steps = executed
        _number(program)


def plan_program_memory(program: Program, options: MemoryOptions, host_kind: str = "c") -> ProgramMemory:
    file_bound = file_order_bound(program, options, naive=True)
    file_same_rules = file_order_bound(program, options, naive=False)
    pooled, buffers, n_inplace = _buffers(program, options.inplace and options.reuse)
    by_name = {t.name: t for t in pooled}
    kinds = _kinds(program, host_kind)
    access = {b.name: frozenset(kinds.get(id(by_name[b.name]), set())) for b in buffers}
    pools = list(options.pools) or [DEFAULT_POOL]
    if options.reuse:
        try:
            plans = plan_pools(buffers, pools, access, options.alignment, options.hill_climb_iterations)
        except PoolOverflowError as err:
            width = max([kernel_spans(f)[0] for f in program.kernels.values()] + [1])
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
        t.pool, t.offset = where.get(t.buffer_owner.name, ("", 0))
    return ProgramMemory(plans, buffers, {t.name: t.buffer_owner.name for t in pooled},
                         lower_bound(buffers, options.alignment), file_bound, n_inplace, file_same_rules)


def overlapping_params(steps: Sequence[Step], kernels: dict[str, PrimFunc]) -> dict[str, frozenset[int]]:
    """Per kernel, the parameters that some call passes memory overlapping another argument's.

    The planner overlaps arguments of one call when they share in place or
    when one is dead before the other is born inside the kernel; those
    parameters must not be declared `restrict`.
    """
    marks: dict[str, set[int]] = {}
    for s in steps:
        if s.kernel not in kernels:
            continue
        ranges = []
        for a, t in enumerate(s.args):
            owner = t.buffer_owner
            if owner.role in POOLED:
                ranges.append((a, id(t), ("pool", t.pool), t.offset, t.offset + t.nbytes))
            else:
                ranges.append((a, id(t), ("tensor", id(owner)), 0, owner.nbytes))
        for i, (a, ta, ka, lo, hi) in enumerate(ranges):
            for b, tb, kb, lo2, hi2 in ranges[i + 1:]:
                if ta != tb and ka == kb and lo < hi2 and lo2 < hi:
                    marks.setdefault(s.kernel, set()).update((a, b))
    return {k: frozenset(v) for k, v in marks.items()}


def with_aliasing(mod: IRModule, steps: Sequence[Step], kernels: dict[str, PrimFunc]) -> IRModule:
    """`mod` (and `kernels`, updated in place) with `MAY_ALIAS_ATTR` on kernels whose arguments overlap."""
    from ..tir.stmt import MAY_ALIAS_ATTR

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


__all__: Sequence[str] = ("MemoryOptions", "Program", "ProgramMemory", "Role", "Step", "Tensor",
                          "extract_program", "plan_program_memory", "liveness_peak")
