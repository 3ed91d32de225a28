"""Operators whose output is chosen by position: one_hot and trilu."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, normalize_axis
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext
from .transform import unravel


# ------------------------------------------------------------------ one_hot
@dataclass(frozen=True)
class OneHotAttrs:
    depth: int
    axis: int = -1


def _one_hot_type(types: tuple[Type, ...], attrs: OneHotAttrs) -> Type:
    idx, values = as_tensor(types[0], "indices"), as_tensor(types[1], "values")
    if dt.is_bool(idx.dtype):
        raise TypeInferenceError("one_hot indices must be numeric, got bool")
    if values.size != 2:
        raise TypeInferenceError(f"values must hold two elements (off, on), got shape {values.shape}")
    if attrs.depth < 0:
        raise TypeInferenceError(f"depth must be non-negative, got {attrs.depth}")
    axis = normalize_axis(attrs.axis, idx.ndim + 1)
    return TensorType(idx.shape[:axis] + (attrs.depth,) + idx.shape[axis:], values.dtype)


def _one_hot_ref(args: list[np.ndarray], attrs: OneHotAttrs) -> np.ndarray:
    idx, values = args[0].astype(np.int64), args[1].reshape(-1)
    axis = normalize_axis(attrs.axis, idx.ndim + 1)
    idx = np.where(idx < 0, idx + attrs.depth, idx)
    hot = np.expand_dims(idx, axis) == np.arange(attrs.depth).reshape((-1,) + (1,) * (idx.ndim - axis))
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def _one_hot_compute(inputs: list[te.Tensor], attrs: OneHotAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    idx, values = inputs
    axis = normalize_axis(attrs.axis, idx.ndim + 1)
    off, on = (values[tuple(unravel(E.IntImm(k), values.shape))] for k in (0, 1))

    def element(*i: E.Var) -> E.PrimExpr:
        v = E.cast(idx[i[:axis] + i[axis + 1:]], "int64")
        v = E.add(v, E.select(E.lt(v, E.const(0, "int64")), E.const(attrs.depth, "int64"), E.const(0, "int64")))
        return E.select(E.eq(v, E.cast(i[axis], "int64")), on, off)

    return te.compute(out.shape, element, name="one_hot")


one_hot = register_op(
    "one_hot", type_rel=_one_hot_type, reference=_one_hot_ref, pattern=OpPattern.INJECTIVE,
    compute=_one_hot_compute, attrs=OneHotAttrs, num_inputs=2,
    doc="one_hot(indices, values=[off, on], depth=, axis=); indices outside [-depth, depth) give off.",
)


# -------------------------------------------------------------------- trilu
@dataclass(frozen=True)
class TriluAttrs:
    k: int = 0
    upper: bool = True


def _trilu_type(types: tuple[Type, ...], attrs: TriluAttrs) -> Type:
    x = as_tensor(types[0])
    if x.ndim < 2:
        raise TypeInferenceError(f"trilu needs a tensor of rank >= 2, got shape {x.shape}")
    return x


def _trilu_ref(args: list[np.ndarray], attrs: TriluAttrs) -> np.ndarray:
    fn = np.triu if attrs.upper else np.tril
    return fn(args[0], attrs.k)


def _trilu_compute(inputs: list[te.Tensor], attrs: TriluAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]

    def element(*i: E.Var) -> E.PrimExpr:
        offset = E.sub(i[-1], i[-2])  # column - row
        keep = E.ge(offset, attrs.k) if attrs.upper else E.le(offset, attrs.k)
        return E.select(keep, x[i], E.const(0, x.dtype))

    return te.compute(out.shape, element, name="trilu")


trilu = register_op(
    "trilu", type_rel=_trilu_type, reference=_trilu_ref, pattern=OpPattern.INJECTIVE,
    compute=_trilu_compute, attrs=TriluAttrs, num_inputs=1,
    doc="Keep the upper (col - row >= k) or lower (col - row <= k) triangle of the last two axes.",
)
