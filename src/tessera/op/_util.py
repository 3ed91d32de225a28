"""Shape and index helpers shared by operator definitions."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import TypeInferenceError
from ..relay.ty import TensorType, TupleType, Type
from ..tir import expr as E


def as_tensor(t: Type, what: str = "input") -> TensorType:
    if not isinstance(t, TensorType):
        raise TypeInferenceError(f"{what} must be a tensor, got {t}")
    return t


def tensors(types: Sequence[Type]) -> list[TensorType]:
    return [as_tensor(t, f"input {k}") for k, t in enumerate(types)]


def same_dtype(types: Sequence[TensorType], what: str = "inputs") -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise TypeInferenceError(f"{what} must share one dtype, got {sorted(dtypes)}")
    return types[0].dtype


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting; names both shapes when they do not fit."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for k in range(ndim):
        dims = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise TypeInferenceError(
                f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_indices(out_index: Sequence[E.PrimExpr], in_shape: Sequence[int]) -> tuple[E.PrimExpr, ...]:
    """Indices into an input of `in_shape` broadcast to the output index."""
    offset = len(out_index) - len(in_shape)
    return tuple(
        E.IntImm(0) if dim == 1 else out_index[offset + k] for k, dim in enumerate(in_shape)
    )


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise TypeInferenceError(f"{what} {axis} out of range for a {ndim}-d tensor (valid: {-ndim}..{ndim - 1})")
    return axis % ndim if ndim else 0


def tuple_of(types: Sequence[TensorType]) -> TupleType:
    return TupleType(tuple(types))
