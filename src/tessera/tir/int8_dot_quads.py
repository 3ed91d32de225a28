"""Int8 dot products two positions by two channels: four accumulators share each loaded word twice.

After `pair_int8_dots`, an int8 convolution (1x1 or im2col) computes

    for x in range(X):                      # output positions, the spatial loop around the channels
        for c2 in range(C / 2):
            acc0 = 0; acc1 = 0
            DOT2_INT8(&a[x * K'], &w[2*c2 * K], &w[(2*c2 + 1) * K], K, acc0, acc1)
            epilogue(acc0, x, 2*c2); epilogue(acc1, x, 2*c2 + 1)

where the activation run of position x + 1 starts a constant K' after that
of position x (K' = K for a position-major im2col or NHWC input). This pass
visits the positions two at a time:

    for x2 in range(X / 2):
        for c2 in range(C / 2):
            acc00 = acc01 = acc10 = acc11 = 0
            DOT2X2_INT8(&a[2*x2 * K'], K', &w[2*c2 * K], K, K, acc00, acc01, acc10, acc11)
            epilogue(acc00, 2*x2, 2*c2); epilogue(acc01, 2*x2, 2*c2 + 1)
            epilogue(acc10, 2*x2 + 1, 2*c2); epilogue(acc11, 2*x2 + 1, 2*c2 + 1)
    [for c2 in range(C / 2): the DOT2 body at x = X - 1]      # odd X only

Each loaded activation word then feeds two weight rows and each weight word
two positions: on a Cortex-M4 the DSP inner step is 4 loads, 8 sign
extensions and 8 SMLADs for 16 multiply-accumulates, against 3 loads,
6 extensions and 4 SMLADs for 8 in the pair. The call carries one base
pointer per operand and the two constant distances, so gcc addresses the
second position and the second weight row with immediate offsets and the
four accumulators stay in registers.

The C code generator runs it right after `pair_int8_dots`. The position
loop qualifies when its body is exactly the paired channel loop, its extent
is a constant of at least 2, the run's offset grows by a constant per
position, and neither the weight rows nor the run length depend on it.

An odd row width would leave one position of every row to the pairs (kws's
feature maps are 25 x 5: a fifth of its convolutions). When the row loop
holds nothing but the position loop and every address in the body depends
on the two loop variables only through `y * X + x` (position-major outputs
and runs), the two loops are first collapsed into one over all positions, so
only the image's last position, if any, is left over.
"""

from __future__ import annotations


from . import expr as E
from . import stmt as S
from .buffer import Buffer, Scope
from .functor import rewrite_loops, substitute, substitute_stmt, walk_expr
from .int8_dot_pairs import moved_tail, paired_parts
from .layout import flat_index
from .simplify import constant_difference


def quad_int8_dots(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with every qualifying position loop visiting two positions per iteration (itself if none)."""
    return rewrite_loops(func, _quads_of)


def _quads_of(loop: S.For) -> S.Stmt | None:
    """The two-position form of `loop`, or of `loop` with its row and column loops collapsed into one."""
    quads = _quads(loop)
    if quads is not None:
        return quads
    rows = _collapsed_rows(loop)
    return None if rows is None else _quads(rows)


def _quads(loop: S.For) -> S.Stmt | None:
    """The two-position form of `loop`, or None when it is not a position loop around a paired channel loop."""
    x, channels = loop.loop_var, loop.body
    if not (isinstance(loop.extent, E.IntImm) and loop.extent.value >= 2 and isinstance(channels, S.For)):
        return None
    pair = paired_parts(channels.body)
    if pair is None:
        return None
    accs, call, tail = pair
    run, row0, row1, n, _, _ = call.args
    if not (isinstance(run, E.BufferPtr) and isinstance(row0, E.BufferPtr) and isinstance(row1, E.BufferPtr)
            and row0.buffer is row1.buffer) or any(_uses(e, x) for e in (row0.offset, row1.offset, n)):
        return None
    run_step = constant_difference(substitute(run.offset, {x: E.add(x, E.IntImm(1, x.dtype))}), run.offset)
    row_step = constant_difference(row1.offset, row0.offset)
    if not run_step or row_step is None:
        return None
    x2 = E.Var(f"{x.name}2", x.dtype)
    positions = [E.mul(x2, E.IntImm(2, x.dtype)), E.add(E.mul(x2, E.IntImm(2, x.dtype)), E.IntImm(1, x.dtype))]
    quad_accs = [[Buffer(f"{a.name}_{p}", (1,), a.dtype, Scope.LOCAL) for a in accs] for p in (0, 1)]
    zero = (E.IntImm(0),)
    loads = [[E.BufferLoad(a, zero, a.dtype) for a in row] for row in quad_accs]
    first_run = E.BufferPtr(run.buffer, substitute(run.offset, {x: positions[0]}))
    parts: list[S.Stmt] = [S.BufferStore(a, E.const(0, a.dtype), zero) for row in quad_accs for a in row]
    parts.append(S.Evaluate(E.Call(E.Intrinsic.DOT2X2_INT8, (
        first_run, E.IntImm(run_step), row0, E.IntImm(row_step), n, *loads[0], *loads[1]), "void")))
    for position, row_loads in zip(positions, loads):
        parts += moved_tail(tail, x, position, list(zip(accs, row_loads)))
    body: S.Stmt = S.SeqStmt(tuple(parts))
    for a in reversed([a for row in quad_accs for a in row]):
        body = S.Allocate(a, body)
    extent = loop.extent.value
    quads = S.For(x2, E.IntImm(extent // 2, loop.extent.dtype), S.For(channels.loop_var, channels.extent, body,
                                                                      channels.kind), loop.kind)
    if extent % 2 == 0:
        return quads
    last = substitute_stmt(channels, {x: E.IntImm(extent - 1, x.dtype)})  # odd extent: one position by pairs
    return S.SeqStmt((quads, last))


def _collapsed_rows(rows: S.For) -> S.For | None:
    """`for y: for x (odd extent X): body` as `for p in range(Y * X): body[y := 0, x := p]` when every address
    in the body is a function of y * X + x, else None."""
    y, positions = rows.loop_var, rows.body
    if not (isinstance(rows.extent, E.IntImm) and isinstance(positions, S.For)
            and isinstance(positions.extent, E.IntImm) and positions.extent.value % 2):
        return None
    x, width = positions.loop_var, positions.extent.value
    if y.dtype != x.dtype or not _position_major(positions.body, y, x, width):
        return None
    p = E.Var(f"{y.name}_{x.name}", x.dtype)
    body = substitute_stmt(positions.body, {y: E.IntImm(0, y.dtype), x: p})
    return S.For(p, E.IntImm(rows.extent.value * width, positions.extent.dtype), body, rows.kind)


def _position_major(s: S.Stmt, y: E.Var, x: E.Var, width: int) -> bool:
    """Whether every expression of `s` uses y and x only inside flat addresses a(y, x) with
    a(y + 1, x) == a(y, x + width). (An address holding another load of y or x is not affine and fails.)"""
    next_row, next_columns = {y: E.add(y, E.IntImm(1, y.dtype))}, {x: E.add(x, E.IntImm(width, x.dtype))}

    def address_ok(e: E.PrimExpr) -> bool:
        return not (_uses(e, y) or _uses(e, x)) or \
            constant_difference(substitute(e, next_row), substitute(e, next_columns)) == 0

    def expr_ok(e: E.PrimExpr) -> bool:
        if e is y or e is x:
            return False  # a bare use outside an address (a bound check, say)
        if isinstance(e, E.BufferLoad):
            return address_ok(flat_index(e.buffer, e.indices))
        if isinstance(e, E.BufferPtr):
            return address_ok(e.offset)
        return all(expr_ok(kid) for kid in E.children(e))

    for stmt in S.walk_stmts(s):
        if isinstance(stmt, S.BufferStore):
            if not (address_ok(flat_index(stmt.buffer, stmt.indices)) and expr_ok(stmt.value)):
                return False
        elif isinstance(stmt, S.Evaluate):
            if not expr_ok(stmt.value):
                return False
        elif isinstance(stmt, S.For):
            if not expr_ok(stmt.extent):
                return False
        elif not isinstance(stmt, (S.SeqStmt, S.Allocate)):
            return False
    return True


def _uses(e: E.PrimExpr, var: E.Var) -> bool:
    return any(n is var for n in walk_expr(e))
