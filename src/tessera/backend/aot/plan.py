"""From the lowered `main` to an AOT program: steps, tensors, pools.

Every tensor of the program is one of: a model input, a model output, a
parameter (constant, stored in the read-only params blob), an intermediate
or a kernel's scratch (both placed in the memory pools by the planner). A
step calls one kernel with its argument tensors: inputs, outputs, scratch.
The steps and their order come from `backend/program.py`, the liveness and
placement from `backend/program_memory.py`, shared with the graph executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...relay.expr import Function
from ...relay.module import IRModule
from ...tir.expr import IntImm
from ...tir.stmt import Allocate, PrimFunc, Return, walk_stmts
from ...tir.buffer import Scope
from ..memory_plan import MemoryPlan, PoolPlan, align_up
from ..program import Role, Step, Tensor, extract_program
from ..program_memory import MemoryOptions, ProgramMemory, plan_program_memory

PARAM_ALIGNMENT = 16
__all__ = ["AotProgram", "Role", "Step", "Tensor", "build_program", "kernel_statuses", "kernel_workspace"]


@dataclass
class AotProgram:
    name: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    params: list[Tensor]
    intermediates: list[Tensor]  # pooled tensors: kernel results and kernel scratch
    steps: list[Step]
    kernels: dict[str, PrimFunc]
    planned: ProgramMemory
    workspace: dict[str, int] = field(default_factory=dict)  # run-time scratch bytes per kernel (not lifted)
    order_strategy: str = "depth_first"

    @property
    def pools(self) -> list[PoolPlan]:
        return self.planned.pools

    @property
    def memory(self) -> MemoryPlan:
        """The plan of the first pool (the only one unless pools were configured)."""
        return self.planned.pools[0].plan

    @property
    def pool_size(self) -> int:
        return self.planned.pools[0].size

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


def kernel_statuses(func: PrimFunc) -> list[int]:
    """The error statuses a kernel's checks return (see te.Check), sorted."""
    return sorted({s.value.value for s in walk_stmts(func.body)
                   if isinstance(s, Return) and isinstance(s.value, IntImm) and s.value.value != 0})


def kernel_workspace(func: PrimFunc, alignment: int = 16) -> int:
    """Bytes of scratch a kernel still asks the run-time allocator for (allocations nest)."""
    return sum(align_up(s.buffer.nbytes, alignment) for s in walk_stmts(func.body)
               if isinstance(s, Allocate) and s.buffer.scope is Scope.GLOBAL)


def build_program(mod: IRModule, name: str, options: MemoryOptions | None = None,
                  host_kind: str = "c") -> AotProgram:
    options = options or MemoryOptions()
    program = extract_program(mod, options.order)
    offset = 0
    for t in program.params:
        t.offset = offset
        offset = align_up(offset + t.nbytes, PARAM_ALIGNMENT)
    names = _output_names(mod.main)
    outputs = _mark_outputs(program.results, program.steps, names)
    planned = plan_program_memory(program, options, host_kind)
    workspace = {k: kernel_workspace(f, options.alignment) for k, f in program.kernels.items()}
    return AotProgram(name, program.inputs, outputs, program.params, program.pooled(), program.steps,
                      program.kernels, planned, {k: v for k, v in workspace.items() if v},
                      program.order_strategy)


def _output_names(main: Function) -> list[str]:
    """The output names the ONNX importer recorded on `main` (none for hand-built modules)."""
    names = main.attrs.extra.get("output_names", ())
    return [str(n) for n in names] if isinstance(names, tuple) else []


def _output_name(k: int, count: int, names: list[str]) -> str:
    """The model's own name for output k (C identifiers are made later, see c_names.py)."""
    if len(names) == count and len(set(names)) == count:
        return names[k]
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
            steps.append(Step("copy", [t, copy], 1, 1, file_index=1 << 30 | len(steps)))
            t.last_use = len(steps) - 1
            outputs.append(copy)
    return outputs
