"""Integer bounds of TIR expressions, given the ranges of their variables.

An interval here is the exact mathematical range of an expression (Python
ints, no wrap-around): when it leaves the range of the expression's dtype,
evaluating the expression in that C type may overflow. What an expression
reads at run time (a buffer load, a call, a float converted to an integer)
is known only by the range of its dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .. import dtype as dt
from . import expr as E

Bounds = tuple[int, int]  # inclusive


def dtype_bounds(dtype: str) -> Bounds:
    """Every value a scalar of integer (or bool) `dtype` can hold."""
    return int(dt.min_value(dtype)), int(dt.max_value(dtype))


def fits(b: Bounds, dtype: str) -> bool:
    lo, hi = dtype_bounds(dtype)
    return lo <= b[0] and b[1] <= hi


def _corners(a: Bounds, b: Bounds, fn: Callable[[int, int], int]) -> Bounds:
    values = [fn(x, y) for x in a for y in b]
    return min(values), max(values)


def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _divide(a: Bounds, b: Bounds, fn: Callable[[int, int], int]) -> Bounds:
    # both quotients are monotonic in each operand while the divisor keeps its sign
    if b[0] > 0 or b[1] < 0:
        return _corners(a, b, fn)
    m = max(abs(a[0]), abs(a[1]))  # a divisor that may be 0 or change sign: |a / b| <= |a|
    return -m, m


def _floormod(a: Bounds, b: Bounds) -> Bounds:
    if b[0] > 0:
        return (0, min(a[1], b[1] - 1)) if a[0] >= 0 else (0, b[1] - 1)
    m = max(abs(b[0]), abs(b[1])) - 1
    return -m, m


def _truncmod(a: Bounds, b: Bounds) -> Bounds:
    m = max(abs(b[0]), abs(b[1])) - 1  # C's %: the sign of the dividend, smaller than the divisor
    if a[0] >= 0:
        return 0, min(a[1], m)
    return (max(a[0], -m), 0) if a[1] <= 0 else (-m, m)


_ARITH: dict[E.BinOp, Callable[[Bounds, Bounds], Bounds]] = {
    E.BinOp.ADD: lambda a, b: (a[0] + b[0], a[1] + b[1]),
    E.BinOp.SUB: lambda a, b: (a[0] - b[1], a[1] - b[0]),
    E.BinOp.MUL: lambda a, b: _corners(a, b, lambda x, y: x * y),
    E.BinOp.FLOORDIV: lambda a, b: _divide(a, b, lambda x, y: x // y),
    E.BinOp.DIV: lambda a, b: _divide(a, b, _trunc_div),
    E.BinOp.FLOORMOD: _floormod,
    E.BinOp.TRUNCMOD: _truncmod,
    E.BinOp.MIN: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    E.BinOp.MAX: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
}
ARITHMETIC = frozenset(_ARITH)


class BoundsAnalysis:
    """Bounds of integer expressions; `ranges` maps id(var) to the var's bounds.

    Results are memoised per node, so one analysis serves one scope: the
    ranges must not change while it is in use.
    """

    def __init__(self, ranges: Mapping[int, Bounds]) -> None:
        self.ranges = ranges
        self._memo: dict[int, tuple[E.PrimExpr, Bounds]] = {}

    def __call__(self, e: E.PrimExpr) -> Bounds:
        hit = self._memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        b = self._compute(e)
        self._memo[id(e)] = (e, b)  # the node is kept alive, so its id is not reused
        return b

    def _compute(self, e: E.PrimExpr) -> Bounds:
        if e.dtype == "bool":
            return 0, 1
        if dt.is_float(e.dtype) or e.dtype == "handle":
            raise TypeError(f"no integer bounds for a {e.dtype} expression")
        if isinstance(e, E.IntImm):
            return e.value, e.value
        if isinstance(e, E.Var):
            return self.ranges.get(id(e), dtype_bounds(e.dtype))
        if isinstance(e, E.BinaryOp) and e.op in _ARITH:
            return _ARITH[e.op](self(e.a), self(e.b))
        if isinstance(e, E.Select):
            t, f = self(e.true_value), self(e.false_value)
            return min(t[0], f[0]), max(t[1], f[1])
        if isinstance(e, E.UnaryOp) and e.op is E.UnOp.NEG:
            a = self(e.a)
            return -a[1], -a[0]
        if isinstance(e, E.Cast) and not dt.is_float(e.value.dtype) and e.value.dtype != "handle":
            inner = self(e.value)
            return inner if fits(inner, e.dtype) else dtype_bounds(e.dtype)
        return dtype_bounds(e.dtype)  # data read at run time, bit operations, calls
