"""Row-major layout: the flat element offset of an index tuple into a buffer."""

from __future__ import annotations

from .. import dtype as dt
from ..errors import CompileError
from . import expr as E
from .buffer import Buffer


def flat_index(buf: Buffer, indices: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
    """The element offset of `indices`; int64 only for buffers past 2**31 elements (see index_width)."""
    if len(indices) != len(buf.shape):
        raise CompileError(
            f"buffer {buf.name} has {len(buf.shape)} dims, accessed with {len(indices)} indices"
        )
    # for an access inside the buffer, every partial sum of the row-major offset is below its size
    dtype = "int32" if buf.size - 1 <= dt.max_value("int32") else "int64"
    flat: E.PrimExpr = E.IntImm(0, dtype)
    before: E.PrimExpr | None = None  # the offset before the previous index was added
    for k, (extent, index) in enumerate(zip(buf.shape, indices)):
        whole = _split_pair(indices[k - 1], index, extent) if before is not None else None
        if before is not None and whole is not None:
            # (before * e + x // c) * c + x % c == before * e * c + x: a tiled buffer read back in
            # order (a register tile's output) keeps a plain index, which gcc vectorises
            flat = E.add(E.mul(before, E.IntImm(buf.shape[k - 1] * extent, dtype)), E.cast(whole, dtype))
            before = None
        else:
            before = flat
            flat = E.add(E.mul(flat, E.IntImm(extent, dtype)), E.cast(index, dtype))
    return flat


def _split_pair(high: E.PrimExpr, low: E.PrimExpr, extent: int) -> E.PrimExpr | None:
    """x when `high` is x // extent and `low` is x % extent (floor division, any x)."""
    if not (isinstance(high, E.BinaryOp) and high.op is E.BinOp.FLOORDIV
            and isinstance(low, E.BinaryOp) and low.op is E.BinOp.FLOORMOD):
        return None
    if not (E.is_const(high.b, extent) and E.is_const(low.b, extent)):
        return None
    same = high.a is low.a or high.a == low.a
    return high.a if same else None
