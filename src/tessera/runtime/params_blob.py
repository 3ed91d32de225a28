"""A flat binary format for named parameter arrays.

Layout (little endian): magic b"TSPRM001", u32 count, then per array:
u32 name length, name (utf-8), u32 dtype length, dtype name, u32 ndim,
i64 dims[ndim], u64 byte size, zero padding to a 64-byte boundary, data.
Data is 64-byte aligned so it can be used in place from a mapped file.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import numpy as np

from ..errors import RuntimeExecutionError

MAGIC = b"TSPRM001"
ALIGN = 64


def _pad(n: int) -> int:
    return (-n) % ALIGN


def save_params(params: Mapping[str, np.ndarray]) -> bytes:
    out = bytearray(MAGIC)
    out += struct.pack("<I", len(params))
    for name in sorted(params):
        arr = np.asarray(params[name], order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        encoded, dtype = name.encode(), arr.dtype.name.encode()
        out += struct.pack("<I", len(encoded)) + encoded
        out += struct.pack("<I", len(dtype)) + dtype
        out += struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape)
        out += struct.pack("<Q", arr.nbytes)
        out += b"\0" * _pad(len(out))
        out += arr.tobytes()
    return bytes(out)


def load_params(blob: bytes | memoryview) -> dict[str, np.ndarray]:
    view = memoryview(blob)
    if bytes(view[:8]) != MAGIC:
        raise RuntimeExecutionError("not a tessera parameter blob (bad magic)")
    pos = 8

    def take(fmt: str) -> tuple:
        nonlocal pos
        size = struct.calcsize(fmt)
        values = struct.unpack_from(fmt, view, pos)
        pos += size
        return values

    (count,) = take("<I")
    result: dict[str, np.ndarray] = {}
    for _ in range(count):
        (n,) = take("<I")
        name = bytes(view[pos:pos + n]).decode()
        pos += n
        (n,) = take("<I")
        dtype = bytes(view[pos:pos + n]).decode()
        pos += n
        (ndim,) = take("<I")
        shape = take(f"<{ndim}q") if ndim else ()
        (nbytes,) = take("<Q")
        pos += _pad(pos)
        result[name] = np.frombuffer(view[pos:pos + nbytes], dtype=dtype).reshape(shape).copy()
        pos += nbytes
    return result
