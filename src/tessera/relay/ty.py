"""Relay types: tensors with static shapes, tuples and functions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from .. import dtype as dt


@dataclass(frozen=True, slots=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        dt.info(self.dtype)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * dt.nbytes(self.dtype)

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape))
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


@dataclass(frozen=True, slots=True)
class TupleType:
    fields: tuple["Type", ...]

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.fields))})"


@dataclass(frozen=True, slots=True)
class FuncType:
    arg_types: tuple["Type", ...]
    ret_type: "Type"

    def __str__(self) -> str:
        return f"fn ({', '.join(map(str, self.arg_types))}) -> {self.ret_type}"


Type = Union[TensorType, TupleType, FuncType]


def flatten_tensor_types(t: Type) -> list[TensorType]:
    """The tensor leaves of a (possibly nested tuple) type, left to right."""
    if isinstance(t, TensorType):
        return [t]
    if isinstance(t, TupleType):
        return [leaf for f in t.fields for leaf in flatten_tensor_types(f)]
    raise TypeError(f"{t} has no tensor leaves")
