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
    for extent, index in zip(buf.shape, indices):
        flat = E.add(E.mul(flat, E.IntImm(extent, dtype)), E.cast(index, dtype))
    return flat
