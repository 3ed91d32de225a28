"""Clamps against a constant as one comparison and one select.

The float maximum and minimum rules (op/elemwise_rules.py) propagate NaN
from either operand: `max(a, b) = (a > b || a != a) ? a : b`. Once a bound
is a known, non-NaN constant, which is what Clip, Relu6 and the hard
sigmoid clamp all are after inlining, the same values come from a single
comparison whose unordered outcome keeps `a`:

    max(a, c) = (a <= c) ? c : a        min(a, c) = (a >= c) ? c : a

Ties still give `c`, and NaN still gives `a`, so results are bit-identical.
The short-circuit `||` is what kept gcc from vectorising the epilogue loop
of every convolution followed by a Clip: its second operand's loads run
conditionally, so the loop is not if-converted. One comparison is one
`vcmpps` and one blend per vector.
"""

from __future__ import annotations

import math

from . import expr as E
from .functor import map_expr

# the comparison of the NaN-propagating rule -> the single comparison that picks the bound
_SINGLE_COMPARE = {E.BinOp.GT: E.BinOp.LE, E.BinOp.LT: E.BinOp.GE}


def _same(x: E.PrimExpr, y: E.PrimExpr) -> bool:
    return x is y or x == y


def _is_false(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def _finite_or_inf_const(e: E.PrimExpr) -> bool:
    return isinstance(e, E.FloatImm) and not math.isnan(e.value)


def _clamp(node: E.PrimExpr) -> E.PrimExpr | None:
    """`node` as a single-comparison select, or None when it is not a NaN-aware clamp to a constant."""
    if not isinstance(node, E.Select) or node.guarded:
        return None
    cond, a, b = node.cond, node.true_value, node.false_value
    if not (isinstance(cond, E.BinaryOp) and cond.op is E.BinOp.OR):
        return None
    compare, nan_test = cond.a, cond.b
    if not (isinstance(compare, E.BinaryOp) and compare.op in _SINGLE_COMPARE):
        return None
    if not (_same(compare.a, a) and _same(compare.b, b)):
        return None
    if _finite_or_inf_const(a):
        # max(c, x) with c constant: `c != c` folded to false, `c > x` alone is the rule
        return E.select(compare, a, b) if _is_false(nan_test) else None
    if not _finite_or_inf_const(b):
        return None
    if not (isinstance(nan_test, E.BinaryOp) and nan_test.op is E.BinOp.NE
            and _same(nan_test.a, a) and _same(nan_test.b, a)):
        return None
    return E.select(E.binary(_SINGLE_COMPARE[compare.op], a, b), b, a)


def single_compare_clamps(e: E.PrimExpr) -> E.PrimExpr:
    """`e` with every NaN-propagating max/min against a non-NaN constant written with one comparison."""
    return map_expr(e, _clamp)
