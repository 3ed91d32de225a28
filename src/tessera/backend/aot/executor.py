"""The executor as TIR: one function that calls every kernel in order.

    int32_t tsgen_<model>_run_model(const T* input..., const uint8_t* params,
                                    T* output..., uint8_t* <pool>...)

Arguments of each call are typed views into a memory pool (intermediates
and kernel scratch, one argument per pool), the params blob (weights) or
the model's own input and output buffers. A kernel
returning non-zero stops the run with its status. Printed by the same C
code generator as the kernels.
"""

from __future__ import annotations

from ...tir import expr as E
from ...tir import stmt as S
from ...tir.buffer import Buffer
from .c_names import tensor_fields
from .plan import AotProgram, Role, Step, Tensor


def executor_name(program: AotProgram) -> str:
    return f"tsgen_{program.name}_run_model"


class _Executor:
    def __init__(self, program: AotProgram) -> None:
        self.program = program
        self.pools = {p.name: Buffer(p.name, (max(p.size, 1),), "uint8") for p in program.pools}
        self.params = Buffer("params", (max(program.params_size, 1),), "uint8")
        self.io: dict[int, Buffer] = {}
        for t, field in tensor_fields(program).items():  # C names the header's structs use too
            self.io[id(t)] = Buffer(field, t.type.shape, t.type.dtype)

    def buffer(self, t: Tensor) -> Buffer:
        if t.role in (Role.INPUT, Role.OUTPUT):
            return self.io[id(t)]
        if t.buffer_owner.role is Role.OUTPUT:  # scratch computed in the output it becomes
            return self.io[id(t.buffer_owner)]
        base = self.params if t.role is Role.PARAM else self.pools[t.pool]
        return base.region(t.name, t.type.shape, t.type.dtype, t.offset)

    def call(self, step: Step, index: int) -> S.Stmt:
        if step.kernel == "copy":
            src, dst = (self.buffer(t).flat() for t in step.args)
            i = E.Var("i")
            return S.For(i, E.IntImm(src.size), S.BufferStore(dst, E.BufferLoad(src, (i,), src.dtype), (i,)))
        ptrs = [E.BufferPtr(self.buffer(t), E.IntImm(0)) for t in step.args]
        status = E.Var("status")
        return S.LetStmt(status, E.call(step.kernel, ptrs, "int32"),
                         S.IfThenElse(E.ne(status, E.IntImm(0)), S.Return(status)))

    def run(self) -> S.PrimFunc:
        # a view's inputs were computed in its result (backend/concat_views.py): nothing to call
        body = S.seq(*(self.call(step, k) for k, step in enumerate(self.program.steps) if not step.view))
        ins = [self.io[id(t)] for t in self.program.inputs]
        outs = [self.io[id(t)] for t in self.program.outputs]
        # the params blob is read-only: list it among the inputs so it is `const`
        params = (*ins, self.params, *outs, *self.pools.values())
        return S.PrimFunc(executor_name(self.program), params, body, len(ins) + 1)


def build_executor(program: AotProgram) -> S.PrimFunc:
    return _Executor(program).run()
