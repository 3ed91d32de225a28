"""Index simplification with known variable ranges.

Reshapes flatten an index and unflatten it again, which leaves
`floordiv`/`floormod` by constants in the innermost loop. With the loops'
extents known, most of them cancel: for an affine `a = c*q + r` whose
remainder part `r` provably lies in [0, c), `a // c == q` and `a % c == r`.
Writing indices in that form turns a reshape kernel back into plain strided
loops that gcc vectorises.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import dtype as dt
from . import expr as E
from .functor import map_expr

Bounds = tuple[int, int]  # inclusive


class _Affine:
    """sum(coef * atom) + const, atoms keyed by identity of a canonical node."""

    def __init__(self, terms: dict[int, tuple[E.PrimExpr, int]] | None = None, const: int = 0) -> None:
        self.terms = terms or {}
        self.const = const

    def add(self, other: "_Affine", sign: int = 1) -> "_Affine":
        terms = dict(self.terms)
        for key, (atom, coef) in other.terms.items():
            old = terms.get(key, (atom, 0))[1]
            if old + sign * coef:
                terms[key] = (atom, old + sign * coef)
            else:
                terms.pop(key, None)
        return _Affine(terms, self.const + sign * other.const)

    def scale(self, k: int) -> "_Affine":
        if k == 0:
            return _Affine()
        return _Affine({key: (a, c * k) for key, (a, c) in self.terms.items()}, self.const * k)

    def to_expr(self, dtype: str) -> E.PrimExpr:
        result: E.PrimExpr = E.const(0, dtype)
        for atom, coef in self.terms.values():
            result = E.add(result, E.mul(atom, E.const(coef, dtype)))
        return E.add(result, E.const(self.const, dtype))


def _key(atom: E.PrimExpr) -> int:
    return id(atom) if isinstance(atom, E.Var) else hash(atom)


def _affine(e: E.PrimExpr) -> _Affine:
    if isinstance(e, E.IntImm):
        return _Affine(const=e.value)
    if isinstance(e, E.BinaryOp) and e.op in (E.BinOp.ADD, E.BinOp.SUB):
        return _affine(e.a).add(_affine(e.b), 1 if e.op is E.BinOp.ADD else -1)
    if isinstance(e, E.BinaryOp) and e.op is E.BinOp.MUL:
        if isinstance(e.b, E.IntImm):
            return _affine(e.a).scale(e.b.value)
        if isinstance(e.a, E.IntImm):
            return _affine(e.b).scale(e.a.value)
    return _Affine({_key(e): (e, 1)})


class _Ranges:
    def __init__(self, extents: Mapping[E.Var, int]) -> None:
        self.extents = {id(v): n for v, n in extents.items()}

    def atom(self, a: E.PrimExpr) -> Bounds | None:
        if isinstance(a, E.Var):
            n = self.extents.get(id(a))
            return None if n is None else (0, n - 1)
        if isinstance(a, E.BinaryOp) and isinstance(a.b, E.IntImm) and a.b.value > 0:
            if a.op is E.BinOp.FLOORMOD:
                return (0, a.b.value - 1)
            if a.op is E.BinOp.FLOORDIV:
                inner = self.of(_affine(a.a))
                return None if inner is None else (inner[0] // a.b.value, inner[1] // a.b.value)
        if isinstance(a, E.BinaryOp) and a.op in (E.BinOp.MIN, E.BinOp.MAX):
            x, y = self.of(_affine(a.a)), self.of(_affine(a.b))
            if x is None or y is None:
                return None
            pick = min if a.op is E.BinOp.MIN else max
            return (pick(x[0], y[0]), pick(x[1], y[1]))
        return None

    def of(self, aff: _Affine) -> Bounds | None:
        lo = hi = aff.const
        for atom, coef in aff.terms.values():
            b = self.atom(atom)
            if b is None:
                return None
            lo += min(coef * b[0], coef * b[1])
            hi += max(coef * b[0], coef * b[1])
        return lo, hi


def _split(e: E.BinaryOp, c: int, ranges: _Ranges) -> E.PrimExpr | None:
    """`e` is `e.a // c` or `e.a % c`, for a positive constant `c`."""
    aff = _affine(e.a)
    quotient, rest = _Affine(), _Affine(const=aff.const % c)
    quotient.const = aff.const // c
    for key, (atom, coef) in aff.terms.items():
        if coef % c == 0:
            quotient.terms[key] = (atom, coef // c)
        else:
            rest.terms[key] = (atom, coef)
    bounds = ranges.of(rest)
    if bounds is None or bounds[0] < 0 or bounds[1] >= c:
        return None
    return (quotient if e.op is E.BinOp.FLOORDIV else rest).to_expr(e.dtype)


def simplify_index(e: E.PrimExpr, extents: Mapping[E.Var, int]) -> E.PrimExpr:
    """`e` with floordiv/floormod by constants cancelled where ranges allow."""
    ranges = _Ranges(extents)

    def visit(node: E.PrimExpr) -> E.PrimExpr | None:
        if not (isinstance(node, E.BinaryOp) and node.op in (E.BinOp.FLOORDIV, E.BinOp.FLOORMOD)):
            return None
        if not isinstance(node.b, E.IntImm) or node.b.value <= 0 or dt.is_float(node.dtype):
            return None
        # (x // a) // b == x // (a * b) for positive a and b
        inner, divisor = node.a, node.b.value
        if node.op is E.BinOp.FLOORDIV and isinstance(inner, E.BinaryOp) and inner.op is E.BinOp.FLOORDIV \
                and isinstance(inner.b, E.IntImm) and inner.b.value > 0:
            divisor = inner.b.value * divisor
            node = E.BinaryOp(E.BinOp.FLOORDIV, inner.a, E.IntImm(divisor, node.dtype), node.dtype)
        return _split(node, divisor, ranges)

    return map_expr(e, visit)


def constant_difference(a: E.PrimExpr, b: E.PrimExpr) -> int | None:
    """d when `a - b` is the constant d whatever its variables' values (both affine in the same terms),
    else None. Sub-expressions that are not affine count as opaque terms, equal only to themselves."""
    diff = _affine(a).add(_affine(b), -1)
    return None if diff.terms else diff.const
