"""The lowered program both executors run: kernel calls and the tensors they touch.

`extract_program(mod)` reads the top-level `main` of a lowered module (every
call is a kernel: a PrimFunc from the default lowering or from a `RelayToTIR`
hook, or for the graph executor an external function) and returns the calls
as `Step`s in the order chosen by `schedule.py`, with every tensor they touch:

* model inputs, parameters (weights), kernel results;
* kernel scratch — the trailing parameters `LiftWorkspaces` made of a
  kernel's global allocations — as a tensor alive during its step only.

Where those tensors live is `program_memory.py`'s job.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import CompileError
from ..relay.expr import Call, Constant, Function, GlobalVar, Tuple, TupleGetItem, Var
from ..relay.module import IRModule
from ..relay.ty import TensorType, TupleType, flatten_tensor_types
from ..relay.visitor import post_order
from ..tir.stmt import PrimFunc
from .lift_workspace import workspace_params
from .schedule import Graph, Node, STRATEGIES, best_order


class Role(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"  # a model output (AOT: the caller's buffer)
    PARAM = "param"
    INTERMEDIATE = "intermediate"
    WORKSPACE = "workspace"  # a kernel's scratch, alive during its step


POOLED = (Role.INTERMEDIATE, Role.WORKSPACE)
ORDERS = ("memory", "file")  # "memory": the order with the lowest peak; "file": the graph's own order


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
    view_offset: int = 0  # bytes from the start of `shares` (a part of a concatenation placed in it)

    @property
    def nbytes(self) -> int:
        return self.type.nbytes

    @property
    def buffer_owner(self) -> "Tensor":
        t = self
        while t.shares is not None:
            t = t.shares
        return t

    @property
    def offset_in_owner(self) -> int:
        """Bytes from the start of the buffer owner's memory to this tensor's."""
        t, offset = self, 0
        while t.shares is not None:
            offset += t.view_offset
            t = t.shares
        return offset


@dataclass(eq=False)
class Step:
    kernel: str
    args: list[Tensor]  # inputs, outputs, then scratch
    num_inputs: int
    num_outputs: int = -1  # -1: every argument after the inputs
    file_index: int = -1  # position in the graph's own (depth-first) order
    view: bool = False  # a concatenation whose parts were placed in its result: nothing to call

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
            t = Tensor(f"p{len(params)}", _tensor_type(node.checked_type, f"constant p{len(params)}"), Role.PARAM,
                       data=np.asarray(node.data))
            params.append(t)
            tensors[id(node)] = [t]
        elif isinstance(node, Tuple):
            tensors[id(node)] = [t for f in node.fields for t in tensors[id(f)]]
        elif isinstance(node, TupleGetItem):
            tuple_type = node.tuple_value.checked_type
            if not isinstance(tuple_type, TupleType):
                raise CompileError(f"item {node.index} taken from a {tuple_type}, not a tuple")
            fields = tuple_type.fields
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
    number_steps(program)
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


def number_steps(program: Program) -> None:
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


__all__: Sequence[str] = ("ORDERS", "POOLED", "Program", "Role", "Step", "Tensor", "extract_program",
                          "number_steps")
