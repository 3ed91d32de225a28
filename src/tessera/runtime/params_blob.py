"""A flat binary format for named parameter arrays.

Layout (little endian): magic b"TSPRM001", u32 count, then per array:
u32 name length, name (utf-8), u32 dtype length, dtype name, u32 ndim,
i64 dims[ndim], u64 byte size, zero padding to a 64-byte boundary, data.
Data is 64-byte aligned so it can be used in place from a mapped file.

`load_params` trusts nothing it reads: every length is checked against
what is left of the blob, so a damaged blob gives an `ArtifactError`
naming the array and the byte offset, never a struct or NumPy error.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping

import numpy as np

from .. import dtype as dt
from ..errors import ArtifactError

MAGIC = b"TSPRM001"
ALIGN = 64
MAX_NDIM = 32  # NumPy's lowest limit across versions
# what tensors can hold; never `object`, whose "data" would be pointers
STORABLE_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                   "float16", "bfloat16", "float32", "float64")


def _pad(n: int) -> int:
    return (-n) % ALIGN


def checked_dtype(name: str, source: str) -> np.dtype:
    """The NumPy dtype a stored dtype name stands for (numbers and bool only)."""
    if name not in STORABLE_DTYPES:
        raise ArtifactError(f"{source}: got dtype {name[:40]!r}, expected one of {', '.join(STORABLE_DTYPES)}")
    return dt.to_numpy(name)


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


class _Reader:
    """Reads fields from a blob, failing with the blob's name and the offset when it runs out."""

    def __init__(self, blob: bytes | memoryview, source: str) -> None:
        self.view = memoryview(blob).cast("B")
        self.source = source
        self.pos = 0
        self.what = "header"

    def fail(self, problem: str) -> ArtifactError:
        return ArtifactError(f"{self.source}: {problem} (in {self.what}, at byte {self.pos}); "
                             "the blob is damaged or was not written by tessera")

    def take(self, n: int) -> memoryview:
        if n > len(self.view) - self.pos:
            raise self.fail(f"truncated: needs {n} more bytes, {len(self.view) - self.pos} left")
        chunk = self.view[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def text(self) -> str:
        (n,) = self.unpack("<I")
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a name is not UTF-8 text") from None


def load_params(blob: bytes | memoryview, source: str = "parameter blob") -> dict[str, np.ndarray]:
    """Arrays from a `save_params` blob; `source` names the blob (e.g. its file) in errors."""
    r = _Reader(blob, source)
    if bytes(r.view[:len(MAGIC)]) != MAGIC:
        raise ArtifactError(f"{source}: not a tessera parameter blob (got magic {bytes(r.view[:8])!r}, "
                            f"expected {MAGIC!r})")
    r.take(len(MAGIC))
    (count,) = r.unpack("<I")
    result: dict[str, np.ndarray] = {}
    for index in range(count):
        r.what = f"array {index}"
        name = r.text()
        r.what = f"array {name!r}"
        if name in result:
            raise r.fail("the name appears twice")
        dtype = checked_dtype(r.text(), f"{source}, array {name!r}")
        (ndim,) = r.unpack("<I")
        if ndim > MAX_NDIM:
            raise r.fail(f"got {ndim} dimensions, at most {MAX_NDIM} are possible")
        shape = r.unpack(f"<{ndim}q")
        if any(d < 0 for d in shape):
            raise r.fail(f"negative dimension in shape {shape}")
        (nbytes,) = r.unpack("<Q")
        if nbytes != math.prod(shape) * dtype.itemsize:
            raise r.fail(f"got {nbytes} data bytes, expected {math.prod(shape) * dtype.itemsize} "
                         f"for shape {shape} of {dtype.name}")
        padding = r.take(_pad(r.pos))
        if any(padding):
            raise r.fail("padding before the data is not zero")
        data = r.take(nbytes)
        try:
            result[name] = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        except ValueError as exc:  # e.g. an empty array with a dimension too large for NumPy
            raise r.fail(f"shape {shape} is impossible ({exc})") from None
    r.what = "the end"
    if r.pos != len(r.view):
        raise r.fail(f"{len(r.view) - r.pos} unexpected bytes after the last array")
    return result
