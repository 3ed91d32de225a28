"""Int8 multiply-accumulates four channels at a time: a channels-innermost depthwise kernel's SIMD.

A depthwise convolution on NHWC data (`op.qnn_nhwc`) computes, per output
position,

    for c in range(C):                       # channels, each its own sum
        acc = 0
        for ry, rx: acc += (int32)a[tap(ry, rx) + c] * (int32)w[(ry * KW + rx) * C + c]
        epilogue(acc, c)

Neighbouring channels are neighbouring bytes of both the activation and the
(tap-major) weight. This pass visits the channels four at a time,

    for c4 in range(C / 4):
        acc_0 = acc_1 = acc_2 = acc_3 = 0
        for ry, rx: MLA4_INT8(&a[tap(ry, rx) + 4*c4], &w[(ry * KW + rx) * C + 4*c4], acc_0, .., acc_3)
        epilogue(acc_k, 4*c4 + k) for k < 4

and `ts_mla4_int8` loads one word of each, sign-extends its even and odd
bytes to halfword pairs (two SXTB16 each) and multiply-accumulates each
lane with SMLABB / SMLATT: 10 instructions for 4 multiply-accumulates on a
Cortex-M4, where the scalar loop takes two byte loads and an MLA for each.

The C code generator runs it after the other int8 dot passes (which leave
these loops alone: their runs advance by C, not 1, per tap). A channel loop
qualifies when its extent is a constant multiple of 4; its body is one local
scalar's init, a statement whose only store is the update
`acc = acc + (int32)a[..] * (int32)b[..]` with both int8 offsets growing by
exactly 1 per channel (possibly inside loops over the taps whose extents do
not depend on the channel), and stores that only read the accumulator.
"""

from __future__ import annotations

import functools

from . import expr as E
from . import stmt as S
from .buffer import Buffer, Scope
from .functor import map_child_stmts, map_expr, map_stmt_exprs, substitute, substitute_stmt, walk_expr
from .layout import flat_index
from .simplify import constant_difference

LANES = 4


def lane_int8_dots(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with every qualifying channel loop visiting four channels per iteration (itself if none)."""
    body = _rewrite(func.body)
    if body is func.body:
        return func
    return S.PrimFunc(func.name, func.params, body, func.num_inputs, func.attrs)


def _rewrite(s: S.Stmt) -> S.Stmt:
    """`s` with channel loops in fours; unchanged statements stay the same objects."""
    if isinstance(s, S.For):
        lanes = _lanes(s)
        if lanes is not None:
            return lanes
    if isinstance(s, S.IfThenElse):
        return s  # conditionals (checks) are left alone, as in the other int8 dot passes
    return map_child_stmts(s, _rewrite)


def _lanes(loop: S.For) -> S.Stmt | None:
    """The four-channel form of `loop`, or None when it is not a channel loop of separate sums."""
    c = loop.loop_var
    if not (isinstance(loop.extent, E.IntImm) and loop.extent.value >= LANES and loop.extent.value % LANES == 0
            and isinstance(loop.body, S.Allocate) and isinstance(loop.body.body, S.SeqStmt)
            and len(loop.body.body.stmts) >= 3):
        return None
    acc = loop.body.buffer
    init, reduction, *tail = loop.body.body.stmts
    if not (acc.scope is Scope.LOCAL and acc.size == 1 and isinstance(init, S.BufferStore) and init.buffer is acc
            and E.is_const(init.value, 0) and acc.dtype == "int32"):
        return None
    if any(isinstance(s, (S.IfThenElse, S.LetStmt, S.Evaluate, S.Allocate)) for s in S.walk_stmts(reduction)):
        return None
    if any(_uses(s.extent, c) for s in S.walk_stmts(reduction) if isinstance(s, S.For)):
        return None
    updates = [s for s in S.walk_stmts(reduction) if isinstance(s, S.BufferStore)]
    runs = _runs(updates[0], acc, c) if len(updates) == 1 else None
    if runs is None:
        return None
    if not all(isinstance(t, S.BufferStore) and t.buffer is not acc for t in tail):
        return None  # the tail only reads the accumulator (the epilogue's stores)
    c4 = E.Var(f"{c.name}4", c.dtype)
    first = E.mul(c4, E.IntImm(LANES, c.dtype))
    accs = [Buffer(f"{acc.name}_{k}", (1,), acc.dtype, Scope.LOCAL) for k in range(LANES)]
    zero = (E.IntImm(0),)
    loads = [E.BufferLoad(a, zero, a.dtype) for a in accs]
    pointers = tuple(E.BufferPtr(p.buffer, substitute(p.offset, {c: first})) for p in runs)
    call = E.Call(E.Intrinsic.MLA4_INT8, (*pointers, *loads), "void")
    parts: list[S.Stmt] = [S.BufferStore(a, E.const(0, a.dtype), zero) for a in accs]
    parts.append(substitute_stmt(_replace(reduction, updates[0], S.Evaluate(call)), {c: first}))
    for k, load in enumerate(loads):
        channel = E.add(first, E.IntImm(k, c.dtype))
        for t in tail:
            parts.append(map_stmt_exprs(substitute_stmt(t, {c: channel}),
                                        functools.partial(_read_acc, acc=acc, load=load)))
    body: S.Stmt = S.SeqStmt(tuple(parts))
    for a in reversed(accs):
        body = S.Allocate(a, body)
    return S.For(c4, E.IntImm(loop.extent.value // LANES, loop.extent.dtype), body, loop.kind)


def _runs(update: S.BufferStore, acc: Buffer, c: E.Var) -> tuple[E.BufferPtr, E.BufferPtr] | None:
    """The two int8 operands of `acc = acc + (int32)a[..] * (int32)b[..]` as pointers, each offset
    growing by exactly 1 per channel; None when `update` is not that."""
    v = update.value
    if not (update.buffer is acc and isinstance(v, E.BinaryOp) and v.op is E.BinOp.ADD and v.dtype == "int32"
            and isinstance(v.a, E.BufferLoad) and v.a.buffer is acc
            and isinstance(v.b, E.BinaryOp) and v.b.op is E.BinOp.MUL):
        return None
    pointers = []
    for operand in (v.b.a, v.b.b):
        if not (isinstance(operand, E.Cast) and operand.dtype == "int32" and isinstance(operand.value, E.BufferLoad)
                and operand.value.dtype == "int8" and operand.value.buffer.scope is not Scope.LOCAL):
            return None
        load = operand.value
        offset = flat_index(load.buffer, load.indices)
        if constant_difference(substitute(offset, {c: E.add(c, E.IntImm(1, c.dtype))}), offset) != 1:
            return None
        pointers.append(E.BufferPtr(load.buffer, offset))
    return pointers[0], pointers[1]


def _replace(s: S.Stmt, old: S.Stmt, new: S.Stmt) -> S.Stmt:
    """`s` with the statement `old` (by identity) replaced by `new`."""
    if s is old:
        return new
    return map_child_stmts(s, lambda child: _replace(child, old, new))


def _uses(e: E.PrimExpr, var: E.Var) -> bool:
    return any(n is var for n in walk_expr(e))


def _read_acc(e: E.PrimExpr, acc: Buffer, load: E.BufferLoad) -> E.PrimExpr:
    """`e` with reads of `acc` replaced by `load`."""
    return map_expr(e, lambda n: load if isinstance(n, E.BufferLoad) and n.buffer is acc else None)
