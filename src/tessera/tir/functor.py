"""Generic rewriting of TIR expressions and statements.

`rebuild` reconstructs a node from new children through the folding builders,
so any substitution also simplifies what it touches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from . import expr as E
from . import stmt as S

ExprFn = Callable[[E.PrimExpr], "E.PrimExpr | None"]


def rebuild(e: E.PrimExpr, kids: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
    """`e` with its children replaced by `kids` (identity when unchanged)."""
    if all(k is o for k, o in zip(kids, E.children(e))):
        return e
    if isinstance(e, E.BinaryOp):
        return E.binary(e.op, kids[0], kids[1])
    if isinstance(e, E.UnaryOp):
        if e.op is E.UnOp.NEG:
            return E.neg(kids[0])
        return E.UnaryOp(e.op, kids[0], e.dtype)
    if isinstance(e, E.Select):
        return E.select(kids[0], kids[1], kids[2], e.guarded)
    if isinstance(e, E.Cast):
        return E.cast(kids[0], e.dtype)
    if isinstance(e, E.BufferLoad):
        return E.BufferLoad(e.buffer, kids, e.dtype)
    if isinstance(e, E.ProducerLoad):
        return E.ProducerLoad(e.producer, kids, e.dtype)
    if isinstance(e, E.Call):
        return E.Call(e.func, kids, e.dtype)
    if isinstance(e, E.BufferPtr):
        return E.BufferPtr(e.buffer, kids[0])
    if isinstance(e, E.ElementMap):
        return E.ElementMap(e.var, kids[0], e.dtype)
    raise TypeError(f"cannot rebuild {type(e).__name__}")


def map_expr(e: E.PrimExpr, fn: ExprFn) -> E.PrimExpr:
    """Rewrite bottom-up: children first, then `fn` on the rebuilt node.

    `fn` returns a replacement or None to keep the node.
    """
    memo: dict[int, E.PrimExpr] = {}

    def visit(node: E.PrimExpr) -> E.PrimExpr:
        key = id(node)
        if key in memo:
            return memo[key]
        kids = tuple(visit(k) for k in E.children(node))
        new = rebuild(node, kids)
        replaced = fn(new)
        result = new if replaced is None else replaced
        memo[key] = result
        return result

    return visit(e)


def substitute(e: E.PrimExpr, vmap: Mapping[E.Var, E.PrimExpr]) -> E.PrimExpr:
    if not vmap:
        return e
    return map_expr(e, lambda n: vmap.get(n) if isinstance(n, E.Var) else None)


def map_stmt_exprs(s: S.Stmt, fn: Callable[[E.PrimExpr], E.PrimExpr]) -> S.Stmt:
    """Apply `fn` to every top-level expression held by statements under `s`."""
    if isinstance(s, S.For):
        return S.For(s.loop_var, fn(s.extent), map_stmt_exprs(s.body, fn), s.kind)
    if isinstance(s, S.SeqStmt):
        return S.SeqStmt(tuple(map_stmt_exprs(x, fn) for x in s.stmts))
    if isinstance(s, S.BufferStore):
        return S.BufferStore(s.buffer, fn(s.value), tuple(fn(i) for i in s.indices))
    if isinstance(s, S.IfThenElse):
        else_case = None if s.else_case is None else map_stmt_exprs(s.else_case, fn)
        return S.IfThenElse(fn(s.cond), map_stmt_exprs(s.then_case, fn), else_case)
    if isinstance(s, S.Allocate):
        return S.Allocate(s.buffer, map_stmt_exprs(s.body, fn))
    if isinstance(s, S.LetStmt):
        return S.LetStmt(s.var, fn(s.value), map_stmt_exprs(s.body, fn))
    if isinstance(s, S.Evaluate):
        return S.Evaluate(fn(s.value))
    if isinstance(s, S.Return):
        return S.Return(fn(s.value))
    raise TypeError(f"unknown statement {type(s).__name__}")


def map_child_stmts(s: S.Stmt, fn: Callable[[S.Stmt], S.Stmt]) -> S.Stmt:
    """`s` with each statement directly under it replaced by `fn(child)`; `s` itself when every
    child comes back unchanged (so passes that rewrite little keep their input's objects)."""
    if isinstance(s, S.For):
        body = fn(s.body)
        return s if body is s.body else S.For(s.loop_var, s.extent, body, s.kind)
    if isinstance(s, S.SeqStmt):
        stmts = tuple(fn(x) for x in s.stmts)
        return s if all(a is b for a, b in zip(stmts, s.stmts)) else S.SeqStmt(stmts)
    if isinstance(s, S.IfThenElse):
        then = fn(s.then_case)
        other = None if s.else_case is None else fn(s.else_case)
        return s if then is s.then_case and other is s.else_case else S.IfThenElse(s.cond, then, other)
    if isinstance(s, S.Allocate):
        body = fn(s.body)
        return s if body is s.body else S.Allocate(s.buffer, body)
    if isinstance(s, S.LetStmt):
        body = fn(s.body)
        return s if body is s.body else S.LetStmt(s.var, s.value, body)
    return s  # stores, evaluations and returns hold no statements


def rewrite_loops(func: S.PrimFunc, rewrite: Callable[[S.For], S.Stmt | None]) -> S.PrimFunc:
    """`func` with every loop for which `rewrite` gives a replacement replaced, outermost first (a
    replaced loop's body is not visited again). Conditionals (checks) are left alone. `func` itself
    when nothing changed; unchanged statements stay the same objects."""
    def visit(s: S.Stmt) -> S.Stmt:
        if isinstance(s, S.For):
            replaced = rewrite(s)
            if replaced is not None:
                return replaced
        if isinstance(s, S.IfThenElse):
            return s
        return map_child_stmts(s, visit)

    body = visit(func.body)
    return func if body is func.body else S.PrimFunc(func.name, func.params, body, func.num_inputs, func.attrs)


def substitute_stmt(s: S.Stmt, vmap: Mapping[E.Var, E.PrimExpr]) -> S.Stmt:
    return map_stmt_exprs(s, lambda e: substitute(e, vmap))


def walk_expr(e: E.PrimExpr) -> Iterator[E.PrimExpr]:
    """Every node under `e`, pre-order (shared sub-trees repeated)."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(E.children(n)))
