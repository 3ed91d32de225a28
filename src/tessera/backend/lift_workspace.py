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

from collections.abc import Callable

from ..relay.module import IRModule
from ..tir import stmt as S
from ..tir.buffer import Buffer, Scope
from ..tir.functor import map_child_stmts
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
        inner_parallel = parallel or (isinstance(s, S.For) and s.kind is S.ForKind.PARALLEL)
        return map_child_stmts(s, lambda child: visit(child, inner_parallel))

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
        return _each_primfunc(mod, lift_workspaces)


class SliceInt8Scratch(Pass):
    """Int8 scratch computed a slice at a time inside the loop that reads it (`tir.scratch_slices`);
    runs before LiftWorkspaces, which then plans the slice."""

    name = "SliceInt8Scratch"
    opt_level = 0

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return _each_primfunc(mod, slice_int8_scratch)


def _each_primfunc(mod: IRModule, rewrite: Callable[[S.PrimFunc], S.PrimFunc]) -> IRModule:
    """`mod` with `rewrite` applied to every PrimFunc (the module itself when none changes)."""
    result = mod
    for gv, func in mod.items():
        if isinstance(func, S.PrimFunc):
            new = rewrite(func)
            if new is not func:
                result = result.with_function(gv, new)
    return result
