"""Two reshapings of a stage's loop nest that let gcc vectorise it.

Splitting at bounds tests (`split_innermost`). A stage that copies padded
data (an im2col tile, say) stores `select(0 <= x && x < w && <row test>,
data[..., x], 0)`, guarded, with `x` affine in the innermost loop
variable; gcc vectorises that loop only with masked loads, about three
times slower than a copy. Split at the points where the tests on that
variable change value, it becomes three loops: zeros, a plain copy, zeros;
the tests that do not involve the variable are made once, around them
(failing, the whole row is zeros). A compute asks for this with
`split_bounds=True`.

Merging contiguous axes (`merge_contiguous_axes`). An elementwise stage
over (n, c, h, w) whose accesses walk (h, w) contiguously, or not at all (a
bias per channel), runs one loop of h * w per channel instead of h short
rows; `lower` does this for the stages that update an extern's result.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..tir import expr as E
from ..tir import stmt as S
from ..tir.functor import map_expr, substitute_stmt, walk_expr
from .tensor import IterKind, IterVar


def split_innermost(var: E.Var, extent: int, store: S.BufferStore) -> S.Stmt | None:
    """The loop `for var in range(extent): store`, split at the bounds its guarded select tests
    on `var`; None when its value is no such select."""
    value = store.value
    if not (isinstance(value, E.Select) and value.guarded):
        return None
    lows: list[E.PrimExpr] = []
    highs: list[E.PrimExpr] = []
    others: list[E.PrimExpr] = []
    for test in _conjuncts(value.cond):
        bound = _bound(test, var)
        if bound is not None:
            (lows if bound[0] == "lo" else highs).append(bound[1])
        elif _uses(test, var):
            return None  # a test on `var` of another form: keep the select
        else:
            others.append(test)
    if not lows and not highs:
        return None
    lets: list[tuple[E.Var, E.PrimExpr]] = []  # bounds known only at run time, named once

    def named(bound: E.PrimExpr, name: str) -> E.PrimExpr:
        if E.is_const(bound):
            return bound
        lets.append((E.Var(name), bound))
        return lets[-1][0]

    lo = named(_clamp(lows, E.maximum, E.IntImm(0), E.IntImm(extent)), "lo")
    hi = named(_clamp(highs, E.minimum, lo, E.IntImm(extent)), "hi")

    def loop(start: E.PrimExpr, count: E.PrimExpr, stored: E.PrimExpr) -> S.Stmt | None:
        if E.is_const(count, 0):
            return None
        i = E.Var(var.name, var.dtype)
        return S.For(i, count, substitute_stmt(S.BufferStore(store.buffer, stored, store.indices), {var: E.add(start, i)}))

    body = S.seq(loop(E.IntImm(0), lo, value.false_value), loop(lo, E.sub(hi, lo), value.true_value),
                 loop(hi, E.sub(E.IntImm(extent), hi), value.false_value))
    for name, value_of_name in reversed(lets):
        body = S.LetStmt(name, value_of_name, body)
    if not others:
        return body
    test = others[0]
    for other in others[1:]:
        test = E.logical_and(test, other)
    return S.IfThenElse(test, body, loop(E.IntImm(0), E.IntImm(extent), value.false_value))


def _conjuncts(cond: E.PrimExpr) -> list[E.PrimExpr]:
    if isinstance(cond, E.BinaryOp) and cond.op is E.BinOp.AND:
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _uses(e: E.PrimExpr, var: E.Var) -> bool:
    return any(n is var for n in walk_expr(e))


def _linear(e: E.PrimExpr, var: E.Var) -> tuple[int, E.PrimExpr] | None:
    """(k, r) with e == k * var + r and r free of `var`; None if e is not of that form."""
    if e is var:
        return 1, E.IntImm(0)
    if not _uses(e, var):
        return 0, e
    if isinstance(e, E.BinaryOp) and e.op in (E.BinOp.ADD, E.BinOp.SUB):
        a, b = _linear(e.a, var), _linear(e.b, var)
        if a is None or b is None:
            return None
        if e.op is E.BinOp.ADD:
            return a[0] + b[0], E.add(a[1], b[1])
        return a[0] - b[0], E.sub(a[1], b[1])
    if isinstance(e, E.BinaryOp) and e.op is E.BinOp.MUL:
        for x, c in ((e.a, e.b), (e.b, e.a)):
            inner = _linear(x, var)
            if isinstance(c, E.IntImm) and inner is not None:
                return inner[0] * c.value, E.mul(inner[1], c.value)
    return None


def _bound(test: E.PrimExpr, var: E.Var) -> tuple[str, E.PrimExpr] | None:
    """("lo", b) for a test meaning var >= b, ("hi", b) for var < b (integer tests, rising in var)."""
    if not (isinstance(test, E.BinaryOp) and test.op in (E.BinOp.GE, E.BinOp.LT) and _uses(test, var)):
        return None
    form = _linear(E.sub(test.a, test.b), var)  # k * var + r, compared with 0
    if form is None or form[0] <= 0 or form[1].dtype != var.dtype:
        return None
    k, r = form
    first = E.floordiv(E.add(E.neg(r), k - 1), k)  # the least var with k * var + r >= 0
    return ("lo" if test.op is E.BinOp.GE else "hi"), first


def _clamp(bounds: list[E.PrimExpr], pick: Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr], low: E.PrimExpr,
           high: E.PrimExpr) -> E.PrimExpr:
    """`pick` of `bounds`, clamped into [low, high]."""
    result = bounds[0] if bounds else (low if pick is E.maximum else high)
    for b in bounds[1:]:
        result = pick(result, b)
    return E.minimum(E.maximum(result, low), high)


def merge_contiguous_axes(axes: list[IterVar], store: S.BufferStore) -> tuple[list[IterVar], S.BufferStore]:
    """An elementwise stage's trailing axes merged into one loop where every access walks them
    contiguously or not at all: an extern's epilogue (bias per channel, ReLU) then runs one long
    vectorisable loop per channel instead of many short rows."""
    for m in range(len(axes), 1, -1):
        tail = [a.var for a in axes[-m:]]
        extents = tuple(a.extent for a in axes[-m:])
        merged = IterVar(E.Var("f", "int32"), math.prod(extents), IterKind.SPATIAL)

        def flatten(node: E.PrimExpr) -> E.PrimExpr | None:
            if (isinstance(node, E.BufferLoad) and node.buffer.shape[-m:] == extents
                    and len(node.indices) >= m and all(i is v for i, v in zip(node.indices[-m:], tail))):
                view = node.buffer.view((*node.buffer.shape[:-m], merged.extent))
                return E.BufferLoad(view, (*node.indices[:-m], merged.var), node.dtype)
            return None

        value = map_expr(store.value, flatten)
        if any(isinstance(n, E.Var) and any(n is v for v in tail) for n in walk_expr(value)):
            continue  # a trailing axis is used some other way
        buf = store.buffer.view((*store.buffer.shape[:-m], merged.extent))
        return [*axes[:-m], merged], S.BufferStore(buf, value, (*(a.var for a in axes[:-m]), merged.var))
    return axes, store
