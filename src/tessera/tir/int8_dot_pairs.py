"""Int8 dot products in pairs: two output channels that read the same activation run share its loads.

After `use_int8_dot`, an int8 convolution (im2col) or dense kernel computes
each output as

    for c in range(C):                  # output channels, innermost spatial loop
        acc = 0
        acc = DOT_INT8(&a[i], &w[c * K], K, acc)
        out[..c..] = epilogue(acc, c)   # requantisation

where the activation run `a[i]` does not depend on `c`. With C even, this
pass visits the channels two at a time:

    for c2 in range(C / 2):
        acc0 = 0; acc1 = 0
        DOT2_INT8(&a[i], &w[2*c2 * K], &w[(2*c2 + 1) * K], K, acc0, acc1)
        out[..2*c2..] = epilogue(acc0, 2*c2); out[..2*c2+1..] = epilogue(acc1, 2*c2+1)

so each activation word is loaded and sign-extended once for two weight rows
(on a Cortex-M4: 13 instructions per 8 multiply-accumulates instead of 16).
The C code generator runs it right after `use_int8_dot`.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import expr as E
from . import stmt as S
from .buffer import Buffer, Scope
from .functor import map_expr, map_stmt_exprs, rewrite_loops, substitute, substitute_stmt, walk_expr


def pair_int8_dots(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with every qualifying channel loop visiting two channels per iteration (itself if none)."""
    return rewrite_loops(func, _paired)


def _paired(loop: S.For) -> S.Stmt | None:
    """The two-channel form of `loop`, or None when it is not a channel loop around one dot product."""
    c = loop.loop_var
    extent = loop.extent.value if isinstance(loop.extent, E.IntImm) else 1
    if extent % 2 or not (isinstance(loop.body, S.Allocate) and isinstance(loop.body.body, S.SeqStmt)
                          and len(loop.body.body.stmts) >= 2):
        return None
    acc = loop.body.buffer
    init, update, *tail = loop.body.body.stmts
    if not (acc.scope is Scope.LOCAL and acc.size == 1 and isinstance(init, S.BufferStore) and init.buffer is acc
            and E.is_const(init.value, 0) and isinstance(update, S.BufferStore) and update.buffer is acc):
        return None
    dot = update.value
    if not (isinstance(dot, E.Call) and dot.func is E.Intrinsic.DOT_INT8):
        return None
    run, weights, n, total = dot.args
    if _uses(run, c) or _uses(n, c) or not (isinstance(total, E.BufferLoad) and total.buffer is acc):
        return None
    if not all(isinstance(t, S.BufferStore) and t.buffer is not acc for t in tail):
        return None  # the tail only reads the accumulator (the epilogue's stores)
    c2 = E.Var(f"{c.name}2", c.dtype)
    accs = [Buffer(f"{acc.name}{k}", (1,), acc.dtype, Scope.LOCAL) for k in (0, 1)]
    channels = [E.mul(c2, E.IntImm(2, c.dtype)), E.add(E.mul(c2, E.IntImm(2, c.dtype)), E.IntImm(1, c.dtype))]
    zero = (E.IntImm(0),)
    loads = [E.BufferLoad(a, zero, a.dtype) for a in accs]
    rows = [substitute(weights, {c: ch}) for ch in channels]
    parts: list[S.Stmt] = [S.BufferStore(a, E.const(0, a.dtype), zero) for a in accs]
    parts.append(S.Evaluate(E.Call(E.Intrinsic.DOT2_INT8, (run, rows[0], rows[1], n, loads[0], loads[1]), "void")))
    for load, ch in zip(loads, channels):
        parts += moved_tail(tail, c, ch, [(acc, load)])
    body: S.Stmt = S.SeqStmt(tuple(parts))
    for a in reversed(accs):
        body = S.Allocate(a, body)
    return S.For(c2, E.IntImm(extent // 2, loop.extent.dtype), body, loop.kind)


def paired_parts(s: S.Stmt) -> tuple[tuple[Buffer, Buffer], E.Call, tuple[S.Stmt, ...]] | None:
    """(accumulators, DOT2 call, epilogue stores) when `s` is the body `pair_int8_dots` makes, else None
    (for the passes that take its pairs further: int8_dot_quads, int8_dot_rows)."""
    if not (isinstance(s, S.Allocate) and isinstance(s.body, S.Allocate) and isinstance(s.body.body, S.SeqStmt)):
        return None
    accs = (s.buffer, s.body.buffer)
    stmts = s.body.body.stmts
    if len(stmts) < 3:
        return None
    *inits, evaluate = stmts[:3]
    tail = stmts[3:]
    if not all(isinstance(i, S.BufferStore) and i.buffer is a and E.is_const(i.value, 0) for i, a in zip(inits, accs)):
        return None
    call = evaluate.value if isinstance(evaluate, S.Evaluate) else None
    if not (isinstance(call, E.Call) and call.func is E.Intrinsic.DOT2_INT8):
        return None
    if not all(isinstance(load, E.BufferLoad) and load.buffer is a for load, a in zip(call.args[4:], accs)):
        return None
    if not all(isinstance(t, S.BufferStore) and all(t.buffer is not a for a in accs) for t in tail):
        return None  # the tail only reads the accumulators (the epilogue's stores)
    return accs, call, tail


def _uses(e: E.PrimExpr, var: E.Var) -> bool:
    return any(n is var for n in walk_expr(e))


def moved_tail(tail: Sequence[S.Stmt], var: E.Var, value: E.PrimExpr,
               reads: Sequence[tuple[Buffer, E.BufferLoad]]) -> list[S.Stmt]:
    """The epilogue statements `tail` for `var = value`, each read of an accumulator of `reads`
    replaced by its load (the accumulator one output of a multi-output dot product wrote)."""
    def read(n: E.PrimExpr) -> E.PrimExpr | None:
        if isinstance(n, E.BufferLoad):
            return next((load for acc, load in reads if n.buffer is acc), None)
        return None

    return [map_stmt_exprs(substitute_stmt(t, {var: value}), lambda e: map_expr(e, read)) for t in tail]
