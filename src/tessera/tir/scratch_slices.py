"""Int8 scratch computed one slice at a time, inside the loop that reads it.

`te.lower` materialises a stage in a buffer of its full size and computes it
before its consumer. For the int8 kernels on microcontrollers that is most of
the RAM: a 3x3 convolution's im2col of a 32x32 image holds 9 copies of its
input, and a depthwise convolution's padded input lives beside its output.
But each iteration of the consumer's outermost loop often reads one slice of
the scratch only (an output row reads its im2col row, an output channel its
padded plane). Then

    for v in range(n):   B[.., v, ..] = producer(v)      # P: writes slice v only
    for v in range(n):   out[..] = consumer(B[.., v, ..])   # C: reads slice v only

computes the same as

    for v in range(n):
        B1 = allocate([.., 1, ..])
        B1[.., 0, ..] = producer(v)
        out[..] = consumer(B1[.., 0, ..])

with a scratch of one slice: the same instructions, 1/n of the memory.
`LiftWorkspaces` then hands the slice to the memory planner, which sees it as
any other scratch. The fused loop runs serially (the slice is shared by its
iterations).

Only global int8 / uint8 scratch is sliced (what the integer kernels of
`op/qnn.py` make), so float kernels are left exactly as they were; and only
scratch larger than the kernel's outputs (a k x k im2col, a padded input):
one no larger adds at most an output's worth to the peak, and slicing it was
measured to cost gcc's scheduling a few instructions (a 1x1 convolution's
NHWC copy on Cortex-M4: +4% on kws) for little memory.
"""

from __future__ import annotations

from collections.abc import Callable

from . import expr as E
from . import stmt as S
from .buffer import Buffer, Scope
from .functor import map_expr, map_stmt_exprs, substitute_stmt, walk_expr

SLICED_DTYPES = ("int8", "uint8")


def slice_int8_scratch(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with each qualifying int8 scratch computed a slice at a time (itself if none qualifies)."""
    allocs: list[Buffer] = []
    body = func.body
    while isinstance(body, S.Allocate):
        allocs.append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, S.SeqStmt) else [body]
    written = sum(b.nbytes for b in func.params[func.num_inputs:])
    kept: list[Buffer] = []
    for buf in allocs:
        worth = buf.scope is Scope.GLOBAL and buf.dtype in SLICED_DTYPES and buf.nbytes > written
        fused = _fuse(stmts, buf) if worth else None
        if fused is None:
            kept.append(buf)
        else:
            stmts = fused
    if len(kept) == len(allocs):
        return func
    new_body = S.seq(*stmts)
    for buf in reversed(kept):
        new_body = S.Allocate(buf, new_body)
    return S.PrimFunc(func.name, func.params, new_body, func.num_inputs, func.attrs)


def _fuse(stmts: list[S.Stmt], buf: Buffer) -> list[S.Stmt] | None:
    """`stmts` with buf's producer and consumer loops fused, or None when they do not qualify."""
    users = [k for k, s in enumerate(stmts) if buf in _stored(s) or buf in _loaded(s)]
    if len(users) != 2 or users[1] != users[0] + 1:
        return None
    producer, consumer = stmts[users[0]], stmts[users[1]]
    if not (isinstance(producer, S.For) and isinstance(consumer, S.For) and E.is_const(producer.extent)
            and E.is_const(consumer.extent) and producer.extent.value == consumer.extent.value):
        return None
    if any(isinstance(t, S.Return) for loop in (producer, consumer) for t in S.walk_stmts(loop)):
        return None  # a failed check must still return before the consumer writes anything
    if _stored(producer) != {buf} or buf in _loaded(producer) or buf in _stored(consumer):
        return None  # the producer only writes the scratch; the consumer only reads it
    if _loaded(producer) & _stored(consumer):
        return None  # a later consumer iteration would change what an earlier producer slice read
    dim = _slice_dim(producer, consumer, buf)
    if dim is None:
        return None
    v = consumer.loop_var
    piece = Buffer(buf.name, buf.shape[:dim] + (1,) + buf.shape[dim + 1:], buf.dtype, buf.scope)
    produce = _retarget(substitute_stmt(producer.body, {producer.loop_var: v}), buf, piece, dim)
    consume = _retarget(consumer.body, buf, piece, dim)
    fused = S.For(v, consumer.extent, S.Allocate(piece, S.seq(produce, consume)), S.ForKind.SERIAL)
    return stmts[:users[0]] + [fused] + stmts[users[1] + 1:]


def _slice_dim(producer: S.For, consumer: S.For, buf: Buffer) -> int | None:
    """The dim of `buf` that every store of the producer indexes by its loop variable and every
    load of the consumer by its own (None if there is none)."""
    stores = [s.indices for s in S.walk_stmts(producer.body) if isinstance(s, S.BufferStore)]
    loads = [n.indices for n in _loads(consumer.body) if n.buffer is buf]
    for dim in range(len(buf.shape)):
        if all(ix[dim] is producer.loop_var for ix in stores) and all(ix[dim] is consumer.loop_var for ix in loads):
            return dim
    return None


def _retarget(s: S.Stmt, old: Buffer, new: Buffer, dim: int) -> S.Stmt:
    """`s` with `old`'s accesses moved to `new`, index `dim` replaced by 0."""

    def index(ix: tuple[E.PrimExpr, ...]) -> tuple[E.PrimExpr, ...]:
        return ix[:dim] + (E.IntImm(0, ix[dim].dtype),) + ix[dim + 1:]

    def load(e: E.PrimExpr) -> E.PrimExpr:
        return map_expr(e, lambda n: E.BufferLoad(new, index(n.indices), n.dtype)
                        if isinstance(n, E.BufferLoad) and n.buffer is old else None)

    s = map_stmt_exprs(s, load)
    return _map_stores(s, lambda st: S.BufferStore(new, st.value, index(st.indices)) if st.buffer is old else st)


def _map_stores(s: S.Stmt, fn: Callable[[S.BufferStore], S.Stmt]) -> S.Stmt:
    if isinstance(s, S.BufferStore):
        return fn(s)
    if isinstance(s, S.For):
        return S.For(s.loop_var, s.extent, _map_stores(s.body, fn), s.kind)
    if isinstance(s, S.SeqStmt):
        return S.SeqStmt(tuple(_map_stores(x, fn) for x in s.stmts))
    if isinstance(s, S.Allocate):
        return S.Allocate(s.buffer, _map_stores(s.body, fn))
    if isinstance(s, S.LetStmt):
        return S.LetStmt(s.var, s.value, _map_stores(s.body, fn))
    if isinstance(s, S.IfThenElse):
        other = None if s.else_case is None else _map_stores(s.else_case, fn)
        return S.IfThenElse(s.cond, _map_stores(s.then_case, fn), other)
    return s  # Evaluate, Return


def _exprs(s: S.Stmt) -> list[E.PrimExpr]:
    found: list[E.PrimExpr] = []

    def note(e: E.PrimExpr) -> E.PrimExpr:
        found.append(e)
        return e

    map_stmt_exprs(s, note)
    return found


def _loads(s: S.Stmt) -> list[E.BufferLoad]:
    return [n for e in _exprs(s) for n in walk_expr(e) if isinstance(n, E.BufferLoad)]


def _loaded(s: S.Stmt) -> set[Buffer]:
    return {n.buffer.root for n in _loads(s) if n.buffer.scope is not Scope.LOCAL}


def _stored(s: S.Stmt) -> set[Buffer]:
    return {t.buffer.root for t in S.walk_stmts(s) if isinstance(t, S.BufferStore) and t.buffer.scope is not Scope.LOCAL}
