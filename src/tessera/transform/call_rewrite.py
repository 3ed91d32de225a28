"""Rewriting a function's calls one by one, then typing it again: the frame of the graph passes that replace
single calls (PackGemmWeights, TrimConvTaps, SplitDilatedConv, PointwiseConvOnVectors, PooledBranchAsBias)."""

from __future__ import annotations

from collections.abc import Callable

from ..relay.expr import Call, Expr, Function
from ..relay.module import IRModule
from ..relay.visitor import rewrite
from .infer_type import infer_function

CallRewrite = Callable[[Call, Call], "Expr | None"]  # (typed call, call with rewritten arguments) -> replacement


def rewrite_calls(func: Function, replace: CallRewrite, mod: IRModule | None = None) -> Function:
    """`func` with every call that `replace(old, new)` gives a replacement for replaced, bottom-up (`old` is
    the typed call, `new` the call over already rewritten arguments, so untyped), and typed again when
    anything changed; `func` itself when nothing did. Functions nested in `func` are left alone."""
    def visit(old: Expr, new: Expr) -> Expr | None:
        return replace(old, new) if isinstance(old, Call) and isinstance(new, Call) else None

    out = rewrite(func, visit, into_functions=False)
    return func if out is func else infer_function(out, mod)
