"""Buffers: named, typed, statically shaped regions of memory."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from .. import dtype as dt


class Scope(enum.Enum):
    GLOBAL = "global"  # a kernel argument or planned workspace
    LOCAL = "local"  # a small scratch array that lives on the stack


@dataclass(frozen=True, eq=False, slots=True)
class Buffer:
    """A dense row-major array. Identity equality: each buffer is one region."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: Scope = Scope.GLOBAL
    base: "Buffer | None" = None  # set on views: the buffer whose memory this one reads
    byte_offset: int = 0  # where a view starts inside its base (views of a memory pool)

    @property
    def root(self) -> "Buffer":
        """The buffer that owns the memory (itself unless this is a view)."""
        return self if self.base is None else self.base.root

    def view(self, shape: tuple[int, ...]) -> "Buffer":
        """The same memory under another (equally sized) shape."""
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot view {self.name} {self.shape} as {shape}")
        return Buffer(self.name, tuple(shape), self.dtype, self.scope, self)

    def region(self, name: str, shape: tuple[int, ...], dtype: str, byte_offset: int) -> "Buffer":
        """A typed tensor living at `byte_offset` inside this (byte) buffer."""
        view = Buffer(name, tuple(shape), dtype, self.scope, self, byte_offset)
        if byte_offset < 0 or byte_offset + view.nbytes > self.nbytes:
            raise ValueError(f"region {name} [{byte_offset}, {byte_offset + view.nbytes}) outside {self.name}")
        return view

    @property
    def total_byte_offset(self) -> int:
        """Offset of this buffer's first element inside its root."""
        return self.byte_offset + (self.base.total_byte_offset if self.base is not None else 0)

    def flat(self) -> "Buffer":
        return self if len(self.shape) == 1 else self.view((self.size,))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * dt.nbytes(self.dtype)

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype})"
