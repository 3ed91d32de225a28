"""LiftWorkspaces: a kernel's scratch becomes a parameter the caller provides.

Kernels allocate scratch with a global-scope TIR `Allocate` (an intermediate
stage of a fused kernel, the padded input of a convolution, the `blas` im2col
block). Left alone, the C code generator turns each into a run-time call of
the workspace allocator, which the memory planner cannot see. This pass
removes those allocations and appends each buffer to the kernel's parameters
(after the outputs); the executors then pass a pointer into the planned pool,
where the scratch is a buffer alive during its one step only.

Scratch under a parallel loop stays an allocation (each thread needs its
own), as do stack-local arrays.
"""

from __future__ import annotations

from ..relay.module import IRModule
from ..tir import stmt as S
from ..tir.buffer import Buffer, Scope
from ..tir.scratch_slices import slice_int8_scratch
from ..transform.pass_infra import Pass, PassContext

WORKSPACES_ATTR = "workspace_params"  # how many trailing parameters are lifted scratch


def workspace_params(func: S.PrimFunc) -> tuple[Buffer, ...]:
    """The parameters of `func` that are scratch the caller provides."""
    count = func.attrs.get(WORKSPACES_ATTR, 0)
    if not isinstance(count, int):
        raise TypeError(f"{func.name}: attribute {WORKSPACES_ATTR!r} must be an int, got {count!r}")
    return func.params[len(func.params) - count:] if count else ()


def lift_workspaces(func: S.PrimFunc) -> S.PrimFunc:
    if WORKSPACES_ATTR in func.attrs:
        return func
    return _lift(func)


def _lift(func: S.PrimFunc) -> S.PrimFunc:
    lifted: list[Buffer] = []

    def visit(s: S.Stmt, parallel: bool) -> S.Stmt:
        if isinstance(s, S.Allocate):
            if s.buffer.scope is Scope.GLOBAL and not parallel:
                lifted.append(s.buffer)
                return visit(s.body, parallel)
            body = visit(s.body, parallel)
            return s if body is s.body else S.Allocate(s.buffer, body)
        if isinstance(s, S.For):
            body = visit(s.body, parallel or s.kind is S.ForKind.PARALLEL)
            return s if body is s.body else S.For(s.loop_var, s.extent, body, s.kind)
        if isinstance(s, S.SeqStmt):
            stmts = tuple(visit(x, parallel) for x in s.stmts)
            return s if all(a is b for a, b in zip(stmts, s.stmts)) else S.SeqStmt(stmts)
        if isinstance(s, S.IfThenElse):
            then = visit(s.then_case, parallel)
            other = None if s.else_case is None else visit(s.else_case, parallel)
            return s if then is s.then_case and other is s.else_case else S.IfThenElse(s.cond, then, other)
        if isinstance(s, S.LetStmt):
            body = visit(s.body, parallel)
            return s if body is s.body else S.LetStmt(s.var, s.value, body)
        return s

    body = visit(func.body, False)
    attrs = dict(func.attrs)
    if not lifted:
        attrs[WORKSPACES_ATTR] = 0
        return S.PrimFunc(func.name, func.params, func.body, func.num_inputs, attrs)
    attrs[WORKSPACES_ATTR] = len(lifted)
    return S.PrimFunc(func.name, (*func.params, *lifted), body, func.num_inputs, attrs)


class LiftWorkspaces(Pass):
    """Every PrimFunc's global scratch becomes trailing parameters (see the module docstring)."""

    name = "LiftWorkspaces"
    opt_level = 0

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        result = mod
        for gv, func in mod.items():
            if isinstance(func, S.PrimFunc):
                new = lift_workspaces(func)
                if new is not func:
                    result = result.with_function(gv, new)
        return result


class SliceInt8Scratch(Pass):
    """Int8 scratch computed a slice at a time inside the loop that reads it (`tir.scratch_slices`);
    runs before LiftWorkspaces, which then plans the slice."""

    name = "SliceInt8Scratch"
    opt_level = 0

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        result = mod
        for gv, func in mod.items():
            if isinstance(func, S.PrimFunc):
                new = slice_int8_scratch(func)
                if new is not func:
                    result = result.with_function(gv, new)
        return result
