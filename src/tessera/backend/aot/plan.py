"""From the lowered `main` to an AOT program: steps, tensors and lifetimes.

Every tensor of the program is one of: a model input, a model output, a
parameter (constant, stored in the read-only params blob) or an
intermediate (placed in the memory pool by the planner). A step calls one
kernel with its argument tensors.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ...errors import CompileError
from ...relay.expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var
from ...relay.module import IRModule
from ...relay.ty import TensorType, flatten_tensor_types
from ...relay.visitor import post_order
from ...tir.stmt import Allocate, PrimFunc, walk_stmts
from ...tir.buffer import Scope
from ..memory_plan import BufferInfo, MemoryPlan, align_up, plan_memory

PARAM_ALIGNMENT = 16


class Role(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"
    PARAM = "param"
    INTERMEDIATE = "intermediate"


@dataclass
class Tensor:
    name: str
    type: TensorType
    role: Role
    producer: int = -1  # step index, -1 for inputs and params
    last_use: int = -1
    offset: int = 0  # in the pool (intermediates) or the params blob (params)
    data: np.ndarray | None = None  # parameter values

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


@dataclass
class Step:
    kernel: str
    args: list[Tensor]  # inputs then outputs
    num_inputs: int


@dataclass
class AotProgram:
    name: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    params: list[Tensor]
    intermediates: list[Tensor]
    steps: list[Step]
    kernels: dict[str, PrimFunc]
    memory: MemoryPlan
    workspace: dict[str, int] = field(default_factory=dict)  # scratch bytes per kernel

    @property
    def pool_size(self) -> int:
        return self.memory.pool_size

    @property
    def params_size(self) -> int:
        return max((t.offset + t.nbytes for t in self.params), default=0)

    @property
    def workspace_size(self) -> int:
        return max(self.workspace.values(), default=0)

    def params_blob(self) -> bytes:
        blob = bytearray(align_up(self.params_size, PARAM_ALIGNMENT))
        for t in self.params:
            raw = np.ascontiguousarray(t.data).tobytes()
            blob[t.offset:t.offset + len(raw)] = raw
        return bytes(blob)


def kernel_workspace(func: PrimFunc, alignment: int = 16) -> int:
    """Bytes of scratch a kernel asks the workspace allocator for (allocations nest)."""
    return sum(align_up(s.buffer.nbytes, alignment) for s in walk_stmts(func.body)
               if isinstance(s, Allocate) and s.buffer.scope is Scope.GLOBAL)


def build_program(mod: IRModule, name: str, alignment: int = 16) -> AotProgram:
    main = mod.main
    tensors: dict[int, list[Tensor]] = {}
    inputs = []
    for p in main.params:
        ty = p.checked_type
        if not isinstance(ty, TensorType):
            raise CompileError(f"AOT: input %{p.name_hint} is not a tensor ({ty})")
        t = Tensor(p.name_hint, ty, Role.INPUT)
        inputs.append(t)
        tensors[id(p)] = [t]
    params: list[Tensor] = []
    steps: list[Step] = []
    kernels: dict[str, PrimFunc] = {}
    intermediates: list[Tensor] = []
    param_offset = 0
    for node in post_order(main.body, into_functions=False):
        if id(node) in tensors or isinstance(node, (Var, GlobalVar, Function)):
            continue
        if isinstance(node, Constant):
            t = Tensor(f"p{len(params)}", node.checked_type, Role.PARAM, data=np.asarray(node.data),
                       offset=param_offset)
            param_offset = align_up(param_offset + t.nbytes, PARAM_ALIGNMENT)
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
            if not isinstance(func, PrimFunc):
                raise CompileError(
                    f"AOT: @{node.op.name_hint} is not a compiled kernel (an external runtime module?); "
                    "the AOT executor calls C kernels only"
                )
            kernels[func.name] = func
            args = [t for a in node.args for t in tensors[id(a)]]
            outs = [Tensor(f"t{len(intermediates) + k}", ty, Role.INTERMEDIATE, producer=len(steps))
                    for k, ty in enumerate(flatten_tensor_types(node.checked_type))]
            intermediates += outs
            for t in args:
                t.last_use = len(steps)
            steps.append(Step(func.name, args + outs, len(args)))
            tensors[id(node)] = outs
        else:
            raise CompileError(f"AOT: cannot execute {type(node).__name__} in main")
    names = list(main.attrs.extra.get("output_names", ()))
    outputs = _mark_outputs(tensors[id(main.body)], steps, names)
    intermediates = [t for t in intermediates if t.role is Role.INTERMEDIATE]
    buffers = [BufferInfo(t.name, t.nbytes, t.producer, max(t.last_use, t.producer)) for t in intermediates]
    memory = plan_memory(buffers, alignment)
    for t in intermediates:
        t.offset = memory.offsets[t.name]
    workspace = {k: kernel_workspace(f, alignment) for k, f in kernels.items()}
    return AotProgram(name, inputs, outputs, params, intermediates, steps, kernels, memory,
                      {k: v for k, v in workspace.items() if v})


def _output_name(k: int, count: int, names: list[str]) -> str:
    from ...codegen.names import sanitize

    if len(names) == count and len(set(names)) == count:
        return sanitize(names[k])
    return f"output{k}" if count > 1 else "output"


def _mark_outputs(results: list[Tensor], steps: list[Step], names: list[str]) -> list[Tensor]:
    """Model outputs: kernel results become output buffers; anything else is copied."""
    outputs: list[Tensor] = []
    for k, t in enumerate(results):
        name = _output_name(k, len(results), names)
        if t.role is Role.INTERMEDIATE and t not in outputs:
            t.role = Role.OUTPUT
            t.name = name
            outputs.append(t)
        else:
            copy = Tensor(name, t.type, Role.OUTPUT, producer=len(steps))
            steps.append(Step("copy", [t, copy], 1))
            t.last_use = len(steps) - 1
            outputs.append(copy)
    return outputs
