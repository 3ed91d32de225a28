"""Int8 depthwise taps two positions at a time: adjacent positions share their activation words.

A depthwise (or grouped) int8 convolution sums its taps straight from the
padded input; after `use_int8_dot` each output is

    for x in range(X):                              # output columns, stride 1
        acc = 0
        for ry in range(KH):
            acc = DOT_INT8(&pad[(y + ry) * W + x], &w[c * KH * KW + ry * KW], KW, acc)
        out[.., x] = epilogue(acc)

The runs of columns x and x + 1 overlap in all but one byte. This pass
visits the columns two at a time,

    for x2 in range(X / 2):
        acc_0 = 0; acc_1 = 0
        for ry in range(KH):
            DOT_SLIDE2_INT8(&pad[(y + ry) * W + 2*x2], &w[..], KW, acc_0, acc_1)
        out[.., 2*x2] = epilogue(acc_0); out[.., 2*x2 + 1] = epilogue(acc_1)
    [acc_0, acc_1 from the columns X - 2 and X - 1; store acc_1]   # odd X only

and `ts_dot_slide2_int8` computes both sums from the same loaded bytes. For
a 3-tap row on a Cortex-M4 that is one word load, two sign extensions, two
SMLADs and two halfword multiply-accumulates for 6 MACs, where two separate
3-tap dots take 6 byte loads and 6 multiply-accumulates.

The C code generator runs it right after `use_int8_dot`. A column loop
qualifies when its body is one local scalar's init, a statement holding
exactly one DOT_INT8 update of that scalar (possibly inside loops over the
taps), and stores that only read it; the run must advance by exactly one
element per column, and neither the weights nor the run length may depend
on the column.
"""

from __future__ import annotations


from . import expr as E
from . import stmt as S
from .buffer import Buffer, Scope
from .functor import map_child_stmts, rewrite_loops, substitute, substitute_stmt, walk_expr
from .int8_dot_pairs import moved_tail
from .simplify import constant_difference


def slide_int8_dots(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with every qualifying column loop visiting two columns per iteration (itself if none)."""
    return rewrite_loops(func, _slid)


def _slid(loop: S.For) -> S.Stmt | None:
    """The two-column form of `loop`, or None when it is not a column loop around short dot products."""
    x = loop.loop_var
    if not (isinstance(loop.extent, E.IntImm) and loop.extent.value >= 2 and isinstance(loop.body, S.Allocate)
            and isinstance(loop.body.body, S.SeqStmt) and len(loop.body.body.stmts) >= 3):
        return None
    acc = loop.body.buffer
    init, reduction, *tail = loop.body.body.stmts
    if not (acc.scope is Scope.LOCAL and acc.size == 1 and isinstance(init, S.BufferStore) and init.buffer is acc
            and E.is_const(init.value, 0)):
        return None
    updates = [s for s in S.walk_stmts(reduction) if isinstance(s, S.BufferStore)]
    dot = _dot_of(updates[0], acc) if len(updates) == 1 else None
    if dot is None:
        return None
    if any(isinstance(s, (S.IfThenElse, S.LetStmt, S.Evaluate, S.Allocate)) for s in S.walk_stmts(reduction)):
        return None
    if any(_uses(s.extent, x) for s in S.walk_stmts(reduction) if isinstance(s, S.For)):
        return None
    run, weights, n, _ = dot.args
    if not (isinstance(run, E.BufferPtr) and isinstance(weights, E.BufferPtr)) or _uses(weights.offset, x) \
            or _uses(n, x):
        return None
    if constant_difference(substitute(run.offset, {x: E.add(x, E.IntImm(1, x.dtype))}), run.offset) != 1:
        return None
    if not all(isinstance(t, S.BufferStore) and t.buffer is not acc for t in tail):
        return None  # the tail only reads the accumulator (the epilogue's stores)
    x2 = E.Var(f"{x.name}2", x.dtype)
    pairs = S.For(x2, E.IntImm(loop.extent.value // 2, loop.extent.dtype),
                  _two_columns(x, E.mul(x2, E.IntImm(2, x.dtype)), acc, reduction, updates[0], dot, tail, True),
                  loop.kind)
    if loop.extent.value % 2 == 0:
        return pairs
    # odd extent: the last column as the second of the pair that starts one column before it (whose first
    # sum is dropped), so its run stays inside the row and every column takes the helper
    last = _two_columns(x, E.IntImm(loop.extent.value - 2, x.dtype), acc, reduction, updates[0], dot, tail,
                        False)
    return S.SeqStmt((pairs, last))


def _two_columns(x: E.Var, first: E.PrimExpr, acc: Buffer, reduction: S.Stmt, update: S.BufferStore,
                 dot: E.Call, tail: list[S.Stmt], store_first: bool) -> S.Stmt:
    """Columns `first` and `first + 1` of the loop body: one DOT_SLIDE2 reduction into two scalars, then
    the epilogue of each column (of the second only unless `store_first`)."""
    run, weights, n, _ = dot.args
    columns = [first, E.add(first, E.IntImm(1, x.dtype))]
    accs = [Buffer(f"{acc.name}_{k}", (1,), acc.dtype, Scope.LOCAL) for k in (0, 1)]
    zero = (E.IntImm(0),)
    loads = [E.BufferLoad(a, zero, a.dtype) for a in accs]
    call = E.Call(E.Intrinsic.DOT_SLIDE2_INT8, (run, weights, n, loads[0], loads[1]), "void")
    parts: list[S.Stmt] = [S.BufferStore(a, E.const(0, a.dtype), zero) for a in accs]
    parts.append(substitute_stmt(_replace_update(reduction, update, S.Evaluate(call)), {x: columns[0]}))
    for column, load in list(zip(columns, loads))[0 if store_first else 1:]:
        parts += moved_tail(tail, x, column, [(acc, load)])
    body: S.Stmt = S.SeqStmt(tuple(parts))
    for a in reversed(accs):
        body = S.Allocate(a, body)
    return body


def _dot_of(update: S.BufferStore, acc: Buffer) -> E.Call | None:
    """The DOT_INT8(run, weights, n, acc) call `update` stores into `acc` itself, else None."""
    value = update.value
    if update.buffer is acc and isinstance(value, E.Call) and value.func is E.Intrinsic.DOT_INT8 \
            and isinstance(value.args[3], E.BufferLoad) and value.args[3].buffer is acc:
        return value
    return None


def _replace_update(s: S.Stmt, update: S.BufferStore, new: S.Stmt) -> S.Stmt:
    """`s` with the statement `update` (by identity) replaced by `new`."""
    if s is update:
        return new
    return map_child_stmts(s, lambda child: _replace_update(child, update, new))


def _uses(e: E.PrimExpr, var: E.Var) -> bool:
    return any(n is var for n in walk_expr(e))
