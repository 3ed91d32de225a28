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

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * dt.nbytes(self.dtype)

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype})"

    def load(self, *indices: object) -> "BufferLoad":
        from .expr import BufferLoad, as_expr

        return BufferLoad(self, tuple(as_expr(i) for i in indices), self.dtype)
