"""resample: one axis of a separable resize (ONNX Resize linear / cubic).

    out[..., o, ...] = sum_t weights[o, t] * x[..., indices[o, t], ...]

The tables are constants computed by the frontend from the coordinate
transformation of the model; rows whose first index is negative lie outside
the input (tf_crop_and_resize extrapolation) and take `fill_value`. The sum
runs in float64, like the ONNX reference, and the result is converted to
`out_dtype` at the end (integers: rounded half to even and saturated), so
several axes can be chained in float64 without intermediate rounding.
"""

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

ACC = "float64"


@dataclass(frozen=True)
class ResampleAttrs:
    axis: int
    out_dtype: str
    fill_value: float = 0.0


def _resample_type(types: tuple[Type, ...], attrs: ResampleAttrs) -> Type:
    x, idx, w = (as_tensor(t, n) for t, n in zip(types, ("data", "indices", "weights")))
    if dt.is_bool(x.dtype) or dt.is_bool(attrs.out_dtype):
        raise TypeInferenceError("resample needs numeric dtypes, got bool")
    if not dt.is_int(idx.dtype) or not dt.is_float(w.dtype):
        raise TypeInferenceError(f"indices must be integers and weights floats, got {idx.dtype} and {w.dtype}")
    if idx.ndim != 2 or idx.shape != w.shape or idx.shape[1] < 1:
        raise TypeInferenceError(
            f"indices and weights must be equal (n_out, taps >= 1) tables, got {idx.shape} and {w.shape}"
        )
    if x.ndim == 0:
        raise TypeInferenceError("resample needs a tensor of rank >= 1, got a scalar")
    axis = normalize_axis(attrs.axis, x.ndim)
    if x.shape[axis] == 0 and idx.size:
        raise TypeInferenceError(f"cannot resample the empty axis {axis} of {x.shape}")
    return TensorType(x.shape[:axis] + (idx.shape[0],) + x.shape[axis + 1:], attrs.out_dtype)


def saturate_np(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 -> dtype as ONNX's saturate_cast: integers round half to even and clip."""
    if dt.is_float(dtype):
        return values.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.round(values), info.min, info.max).astype(dtype)


def _resample_ref(args: list[np.ndarray], attrs: ResampleAttrs) -> np.ndarray:
    x, idx, w = args
    axis = normalize_axis(attrs.axis, x.ndim)
    n_out, taps = idx.shape
    outside = idx[:, 0] < 0
    gathered = np.take(x.astype(ACC), np.clip(idx, 0, max(x.shape[axis] - 1, 0)), axis=axis)
    shape = (1,) * axis + (n_out, taps) + (1,) * (x.ndim - axis - 1)
    acc = (gathered * w.astype(ACC).reshape(shape)).sum(axis=axis + 1)
    acc = np.where(outside.reshape(shape[:axis + 1] + shape[axis + 2:]), attrs.fill_value, acc)
    return saturate_np(acc, attrs.out_dtype)


def _saturate(v: E.PrimExpr, dtype: str) -> E.PrimExpr:
    if dt.is_float(dtype):
        return E.cast(v, dtype)
    v = E.call(E.Intrinsic.ROUND, [v], ACC)
    v = E.minimum(E.maximum(v, E.const(dt.min_value(dtype), ACC)), E.const(dt.max_value(dtype), ACC))
    return E.cast(v, dtype)


def _resample_compute(inputs: list[te.Tensor], attrs: ResampleAttrs, out: TensorType,
                      sched: ScheduleContext) -> te.Tensor:
    x, idx, w = inputs
    axis = normalize_axis(attrs.axis, x.ndim)
    last = max(x.shape[axis] - 1, 0)
    t = te.reduce_axis(idx.shape[1], "t")

    def tap(i: tuple[E.Var, ...], k: E.PrimExpr) -> E.PrimExpr:
        pos = E.cast(idx[(i[axis], k)], "int32")
        pos = E.minimum(E.maximum(pos, 0), last)
        return E.mul(E.cast(w[(i[axis], k)], ACC), E.cast(x[i[:axis] + (pos,) + i[axis + 1:]], ACC))

    acc = te.compute(out.shape, lambda *i: te.sum(tap(i, t.var), t), name="resample_acc")
    fill = E.const(attrs.fill_value, ACC)

    def element(*i: E.Var) -> E.PrimExpr:
        outside = E.lt(idx[(i[axis], 0)], E.const(0, idx.dtype))
        return _saturate(E.select(outside, fill, acc[i]), attrs.out_dtype)

    return te.compute(out.shape, element, name="resample")


resample = register_op(
    "resample", type_rel=_resample_type, reference=_resample_ref, pattern=OpPattern.COMM_REDUCE,
    compute=_resample_compute, attrs=ResampleAttrs, num_inputs=3,
    doc="resample(x, indices, weights, axis=, out_dtype=, fill_value=): weighted taps along one axis.",
)
