"""Int8 dot products four weight rows at a time: one activation run, loaded and extended once per 4 rows.

A dense layer (and the last position of an odd-sized convolution after
`quad_int8_dots`) keeps the form `pair_int8_dots` gives it:

    for c2 in range(C / 2):
        acc0 = 0; acc1 = 0
        DOT2_INT8(&a[i], &w[2*c2 * K], &w[(2*c2 + 1) * K], K, acc0, acc1)
        epilogue(acc0, 2*c2); epilogue(acc1, 2*c2 + 1)

With no second position to share the weight words with, the remaining
saving is in the activation: this pass visits four rows per iteration when
C / 2 is even,

    for c4 in range(C / 4):
        acc0 = acc1 = acc2 = acc3 = 0
        DOT4_INT8(&a[i], &w[4*c4 * K], K, K, acc0, acc1, acc2, acc3)
        epilogue(acc0, 4*c4) ... epilogue(acc3, 4*c4 + 3)

so each activation word's two SMLAD halves serve four rows. On a Cortex-M4
the DSP step is 5 loads, 10 sign extensions and 8 SMLADs for 16 multiply-
accumulates, against 3, 6 and 4 for 8 in the pair. The rows are a constant
distance apart, so the helper addresses them with immediate offsets from one
pointer. The C code generator runs it after `quad_int8_dots`.
"""

from __future__ import annotations


from . import expr as E
from . import stmt as S
from .buffer import Buffer, Scope
from .functor import rewrite_loops, substitute, walk_expr
from .int8_dot_pairs import moved_tail, paired_parts
from .simplify import constant_difference


def row_int8_dots(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with every qualifying paired channel loop visiting four rows per iteration (itself if none)."""
    return rewrite_loops(func, _rows)


def _rows(loop: S.For) -> S.Stmt | None:
    """The four-row form of `loop`, or None when it is not a paired channel loop of even extent."""
    c2 = loop.loop_var
    if not (isinstance(loop.extent, E.IntImm) and loop.extent.value % 2 == 0):
        return None
    pair = paired_parts(loop.body)
    if pair is None:
        return None
    accs, call, tail = pair
    run, row0, row1, n, _, _ = call.args
    if not (isinstance(run, E.BufferPtr) and isinstance(row0, E.BufferPtr) and isinstance(row1, E.BufferPtr)
            and row0.buffer is row1.buffer) or _uses(run.offset, c2) or _uses(n, c2):
        return None
    row_step = constant_difference(row1.offset, row0.offset)
    next_pair = constant_difference(substitute(row0.offset, {c2: E.add(c2, E.IntImm(1, c2.dtype))}), row0.offset)
    if row_step is None or next_pair != 2 * row_step:
        return None  # the four rows must be evenly spaced
    c4 = E.Var(f"{c2.name[:-1] if c2.name.endswith('2') else c2.name}4", c2.dtype)
    pairs = [E.mul(c4, E.IntImm(2, c2.dtype)), E.add(E.mul(c4, E.IntImm(2, c2.dtype)), E.IntImm(1, c2.dtype))]
    row_accs = [[Buffer(f"{a.name}_{h}", (1,), a.dtype, Scope.LOCAL) for a in accs] for h in (0, 1)]
    zero = (E.IntImm(0),)
    loads = [[E.BufferLoad(a, zero, a.dtype) for a in half] for half in row_accs]
    # row order: pair 2*c4 (rows 0 and 1), then pair 2*c4 + 1 (rows 2 and 3)
    ordered = [loads[0][0], loads[0][1], loads[1][0], loads[1][1]]
    parts: list[S.Stmt] = [S.BufferStore(a, E.const(0, a.dtype), zero) for half in row_accs for a in half]
    first_row = E.BufferPtr(row0.buffer, substitute(row0.offset, {c2: pairs[0]}))
    parts.append(S.Evaluate(E.Call(E.Intrinsic.DOT4_INT8, (run, first_row, E.IntImm(row_step), n, *ordered), "void")))
    for pair_index, half in zip(pairs, loads):
        parts += moved_tail(tail, c2, pair_index, list(zip(accs, half)))
    body: S.Stmt = S.SeqStmt(tuple(parts))
    for a in reversed([a for half in row_accs for a in half]):
        body = S.Allocate(a, body)
    return S.For(c4, E.IntImm(loop.extent.value // 2, loop.extent.dtype), body, loop.kind)


def _uses(e: E.PrimExpr, var: E.Var) -> bool:
    return any(n is var for n in walk_expr(e))
