"""What a C function's body refers to by name, so that its locals can keep clear of it."""

from __future__ import annotations

from ..tir import expr as E
from ..tir import stmt as S


def extern_calls(body: S.Stmt) -> set[str]:
    """Names of the external functions `body` calls (`call_extern`)."""
    names: set[str] = set()
    seen: set[int] = set()
    stack: list[E.PrimExpr] = [e for s in S.walk_stmts(body) for e in _stmt_exprs(s)]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, E.Call) and isinstance(e.func, str):
            names.add(e.func)
        stack.extend(E.children(e))
    return names


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
