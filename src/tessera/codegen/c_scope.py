"""The functions a C function's body calls by name, so that its locals keep clear of them.

A kernel's parameters may carry a user's names (a target hook may lower a
partition with the graph's own variables): a parameter named `expf` or like
the library routine the body calls would hide that function.
"""

from __future__ import annotations

from ..tir import expr as E
from ..tir import stmt as S

# Intrinsics the C code generator writes as C library calls (`name`, or `namef` for float32).
FLOAT_INTRINSICS = {
    E.Intrinsic.EXP: "exp", E.Intrinsic.LOG: "log", E.Intrinsic.SQRT: "sqrt",
    E.Intrinsic.TANH: "tanh", E.Intrinsic.SIN: "sin", E.Intrinsic.COS: "cos",
    E.Intrinsic.TAN: "tan", E.Intrinsic.ASIN: "asin", E.Intrinsic.ACOS: "acos",
    E.Intrinsic.ATAN: "atan", E.Intrinsic.SINH: "sinh", E.Intrinsic.COSH: "cosh",
    E.Intrinsic.ASINH: "asinh", E.Intrinsic.ACOSH: "acosh", E.Intrinsic.ATANH: "atanh",
    E.Intrinsic.ERF: "erf", E.Intrinsic.FLOOR: "floor", E.Intrinsic.CEIL: "ceil",
    E.Intrinsic.ROUND: "nearbyint", E.Intrinsic.FABS: "fabs",
}
CLASSIFY_INTRINSICS = {
    E.Intrinsic.ISNAN: "isnan", E.Intrinsic.ISINF: "isinf",
    E.Intrinsic.ISFINITE: "isfinite", E.Intrinsic.SIGNBIT: "signbit",
}
# Operators written as C library calls on floating-point operands.
_OPERATOR_FUNCTIONS = {E.BinOp.POW: "pow", E.BinOp.TRUNCMOD: "fmod", E.BinOp.FLOORDIV: "floor"}


def called_functions(body: S.Stmt) -> set[str]:
    """Every function name `body` may call: external functions and the C library routines of its math."""
    names: set[str] = set()
    for e in _distinct_exprs(body):
        if isinstance(e, E.Call) and isinstance(e.func, str):
            names.add(e.func)
        elif isinstance(e, E.Call) and e.func in FLOAT_INTRINSICS:
            names.update(_float_variants(FLOAT_INTRINSICS[e.func]))
        elif isinstance(e, E.Call) and e.func in CLASSIFY_INTRINSICS:
            names.add(CLASSIFY_INTRINSICS[e.func])
        elif isinstance(e, E.BinaryOp) and e.op in _OPERATOR_FUNCTIONS:
            names.update(_float_variants(_OPERATOR_FUNCTIONS[e.op]))
    return names


def _float_variants(name: str) -> tuple[str, str]:
    return name, name + "f"


def _distinct_exprs(body: S.Stmt) -> list[E.PrimExpr]:
    """Every expression node under `body`, each once (shared sub-trees are not walked again)."""
    seen: set[int] = set()
    found: list[E.PrimExpr] = []
    stack: list[E.PrimExpr] = [e for s in S.walk_stmts(body) for e in _stmt_exprs(s)]
    while stack:
        e = stack.pop()
        if id(e) not in seen:
            seen.add(id(e))
            found.append(e)
            stack.extend(E.children(e))
    return found


def _stmt_exprs(s: S.Stmt) -> tuple[E.PrimExpr, ...]:
    if isinstance(s, S.For):
        return (s.extent,)
    if isinstance(s, S.BufferStore):
        return (s.value, *s.indices)
    if isinstance(s, S.IfThenElse):
        return (s.cond,)
    if isinstance(s, (S.LetStmt, S.Evaluate, S.Return)):
        return (s.value,)
    return ()
