"""Data-movement operators: reshape, transpose, concatenate, split, slices, ...

All of them are injective (each output element reads one input element), so
they fuse into their neighbours and usually cost no kernel of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, TupleType, Type
from ..tir import expr as E
from ._util import as_tensor, normalize_axis, same_dtype, tensors
from .registry import OpPattern, register_op


def unravel(flat: E.PrimExpr, shape: tuple[int, ...]) -> list[E.PrimExpr]:
    """Row-major indices of element `flat` in `shape`."""
    idx: list[E.PrimExpr] = []
    for k in range(len(shape) - 1, -1, -1):
        extent = shape[k]
        idx.append(E.floormod(flat, extent) if k else flat)
        flat = E.floordiv(flat, extent)
    idx.reverse()  # the outermost index took no modulo: flat < size
    return idx


def ravel(indices: tuple[E.PrimExpr, ...], shape: tuple[int, ...]) -> E.PrimExpr:
    flat: E.PrimExpr = E.IntImm(0)
    for i, extent in zip(indices, shape):
        flat = E.add(E.mul(flat, extent), i)
    return flat


# ----------------------------------------------------------------- reshape
@dataclass(frozen=True)
class ReshapeAttrs:
    newshape: tuple[int, ...]


def _reshape_type(types: tuple[Type, ...], attrs: ReshapeAttrs) -> Type:
    x = as_tensor(types[0])
    if any(s < 0 for s in attrs.newshape):
        raise TypeInferenceError(f"reshape target {attrs.newshape} must be fully specified")
    if math.prod(attrs.newshape) != x.size:
        raise TypeInferenceError(f"cannot reshape {x.shape} ({x.size} elements) to {attrs.newshape}")
    return TensorType(attrs.newshape, x.dtype)


def _reshape_compute(inputs: list[te.Tensor], attrs: ReshapeAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]
    if x.shape == out.shape:
        return te.compute(out.shape, lambda *i: x[i], name="reshape")
    return te.compute(out.shape, lambda *i: x[tuple(unravel(ravel(i, out.shape), x.shape))], name="reshape")


reshape = register_op(
    "reshape", type_rel=_reshape_type, reference=lambda args, a: args[0].reshape(a.newshape),
    pattern=OpPattern.INJECTIVE, compute=_reshape_compute, attrs=ReshapeAttrs, num_inputs=1,
)


# --------------------------------------------------------------- transpose
@dataclass(frozen=True)
class TransposeAttrs:
    axes: tuple[int, ...]


def _transpose_type(types: tuple[Type, ...], attrs: TransposeAttrs) -> Type:
    x = as_tensor(types[0])
    if sorted(attrs.axes) != list(range(x.ndim)):
        raise TypeInferenceError(f"axes {attrs.axes} are not a permutation of {x.ndim} dims")
    return TensorType(tuple(x.shape[a] for a in attrs.axes), x.dtype)


def _transpose_compute(inputs: list[te.Tensor], attrs: TransposeAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]
    inverse = np.argsort(attrs.axes)
    return te.compute(out.shape, lambda *i: x[tuple(i[int(k)] for k in inverse)], name="transpose")


transpose = register_op(
    "transpose", type_rel=_transpose_type,
    reference=lambda args, a: np.ascontiguousarray(np.transpose(args[0], a.axes)),
    pattern=OpPattern.INJECTIVE, compute=_transpose_compute, attrs=TransposeAttrs, num_inputs=1,
)


# ------------------------------------------------------------- concatenate
@dataclass(frozen=True)
class ConcatAttrs:
    axis: int


def _concat_type(types: tuple[Type, ...], attrs: ConcatAttrs) -> Type:
    ts = tensors(types)
    if not ts:
        raise TypeInferenceError("concatenate needs at least one input")
    dtype = same_dtype(ts)
    nd = ts[0].ndim
    axis = normalize_axis(attrs.axis, nd)
    for t in ts:
        if t.ndim != nd or any(t.shape[k] != ts[0].shape[k] for k in range(nd) if k != axis):
            raise TypeInferenceError(
                f"shapes {[t.shape for t in ts]} differ outside axis {axis}"
            )
    shape = list(ts[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    return TensorType(tuple(shape), dtype)


def _concat_compute(inputs: list[te.Tensor], attrs: ConcatAttrs, out: TensorType) -> te.Tensor:
    axis = normalize_axis(attrs.axis, len(out.shape))

    def element(*i: E.Var) -> E.PrimExpr:
        offsets = np.cumsum([0] + [t.shape[axis] for t in inputs])
        value: E.PrimExpr | None = None
        for k in range(len(inputs) - 1, -1, -1):
            t = inputs[k]
            if t.shape[axis] == 0:
                continue
            idx = list(i)
            idx[axis] = E.sub(i[axis], int(offsets[k]))
            read = t[tuple(idx)]
            if value is None:
                value = read
            else:
                value = E.select(E.lt(i[axis], int(offsets[k + 1])), read, value)
        assert value is not None
        return value

    return te.compute(out.shape, element, name="concatenate")


concatenate = register_op(
    "concatenate", type_rel=_concat_type,
    reference=lambda args, a: np.concatenate(args, axis=a.axis),
    pattern=OpPattern.INJECTIVE, compute=_concat_compute, attrs=ConcatAttrs,
)
