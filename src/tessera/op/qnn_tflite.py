"""Integer ops only LiteRT's arithmetic needs, made by `transform.quantize_to_integer` from a TFLite
model's dequantize -> op -> quantize (``Rounding.TFLITE``):

* ``qnn.mul`` (MUL, broadcasting): ``y = MultiplyByQuantizedMultiplier((a - za) * (b - zb), q, e) + zo``,
  saturated to int8 and then to a fused activation's bounds; ``(q, e)`` come from
  ``input_scale_a * input_scale_b / output_scale`` (`op.qnn_rounding`);
* ``qnn.mean`` (MEAN): the int32 sum of the window minus ``zi * count``, rescaled by
  ``input_scale / output_scale`` with ``1 / count`` folded into the Q31 multiplier
  (`mean_multiplier`, as LiteRT's reference QuantizedMeanOrSum folds it), plus ``zo``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, broadcast_indices, broadcast_shapes
from .reduce import ReduceAttrs, reduced_axes, reduced_shape
from .qnn import INT8, Requant, clamp_int8
from .qnn_rounding import multiply_expr, multiply_ref
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


@dataclass(frozen=True)
class QMulAttrs:
    a_zero_point: int
    b_zero_point: int
    multiplier: tuple[int, int]  # (Q31 multiplier, exponent)
    requant: Requant


def _type(types: tuple[Type, ...], attrs: QMulAttrs) -> Type:
    a, b = (as_tensor(t) for t in types)
    if a.dtype != "int8" or b.dtype != "int8":
        raise TypeInferenceError(f"qnn.mul needs two int8 tensors, got {a} and {b}")
    return TensorType(broadcast_shapes(a.shape, b.shape), "int8")


def _shifts(attrs: QMulAttrs) -> tuple[int, int, int]:
    q, e = attrs.multiplier
    return q, max(e, 0), max(-e, 0)


def _ref(args: list[np.ndarray], attrs: QMulAttrs) -> np.ndarray:
    a, b = (v.astype(np.int64) for v in args)
    q, left, right = _shifts(attrs)
    r = attrs.requant
    y = multiply_ref((a - attrs.a_zero_point) * (b - attrs.b_zero_point), q, left, right) + r.output_zero_point
    return np.clip(np.clip(y, *INT8), r.lo, r.hi).astype(np.int8)


def _compute(inputs: list[te.Tensor], attrs: QMulAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    a, b = inputs
    q, left, right = _shifts(attrs)
    r = attrs.requant

    def element(*i: E.Var) -> E.PrimExpr:
        da = E.sub(E.cast(a[broadcast_indices(i, a.shape)], "int32"), E.const(attrs.a_zero_point, "int32"))
        db = E.sub(E.cast(b[broadcast_indices(i, b.shape)], "int32"), E.const(attrs.b_zero_point, "int32"))
        shift = E.const(left, "int32") if left else None
        y = multiply_expr(E.mul(da, db), E.const(q, "int32"), shift, E.const(right, "int32"))
        return clamp_int8(E.add(y, E.const(r.output_zero_point, "int32")), r)

    return te.compute(out.shape, element, name="qmul")


qmul = register_op(
    "qnn.mul", type_rel=_type, reference=_ref, pattern=OpPattern.ELEMWISE, compute=_compute, attrs=QMulAttrs,
    num_inputs=2, doc="int8 x int8 element-wise product with LiteRT's requantisation (TFLite MUL).",
)


# ---------------------------------------------------------------- mean
def mean_multiplier(q: int, e: int, count: int) -> tuple[int, int]:
    """LiteRT's QuantizedMeanOrSum: (q, e) of input / output scale with 1 / count folded in."""
    shift = min(count.bit_length() - 1, 32, 31 + e)
    return (q << shift) // count, e - shift


@dataclass(frozen=True)
class QMeanAttrs:
    reduce: ReduceAttrs
    input_zero_point: int
    multiplier: tuple[int, int]  # (Q31 multiplier, exponent), 1 / count folded in (`mean_multiplier`)
    requant: Requant


def _mean_type(types: tuple[Type, ...], attrs: QMeanAttrs) -> Type:
    x = as_tensor(types[0])
    if x.dtype != "int8":
        raise TypeInferenceError(f"qnn.mean takes int8, got {x.dtype}")
    axes = reduced_axes(x.ndim, attrs.reduce.axes)
    return TensorType(reduced_shape(x.shape, axes, attrs.reduce.keepdims), "int8")


def _count(shape: tuple[int, ...], attrs: QMeanAttrs) -> int:
    axes = reduced_axes(len(shape), attrs.reduce.axes)
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _mean_ref(args: list[np.ndarray], attrs: QMeanAttrs) -> np.ndarray:
    x = args[0]
    axes = reduced_axes(x.ndim, attrs.reduce.axes)
    total = x.astype(np.int64).sum(axis=axes, keepdims=attrs.reduce.keepdims)
    q, e = attrs.multiplier
    shifted = total - attrs.input_zero_point * _count(x.shape, attrs)
    y = multiply_ref(shifted, q, max(e, 0), max(-e, 0)) + attrs.requant.output_zero_point
    return np.clip(y, *INT8).astype(np.int8)


def _mean_compute(inputs: list[te.Tensor], attrs: QMeanAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    axes = reduced_axes(x.ndim, attrs.reduce.axes)
    raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}

    def window(*i: E.Var) -> E.PrimExpr:
        index, pos = [], 0
        for k in range(x.ndim):
            if k in raxes:
                index.append(raxes[k].var)
                pos += 1 if attrs.reduce.keepdims else 0
            else:
                index.append(i[pos])
                pos += 1
        return te.sum(E.cast(x[tuple(index)], "int32"), list(raxes.values()))

    total = te.compute(out.shape, window, name="qmean_sum")
    q, e = attrs.multiplier
    offset = E.const(attrs.input_zero_point * _count(tuple(x.shape), attrs), "int32")

    def element(*i: E.Var) -> E.PrimExpr:
        y = multiply_expr(E.sub(total[i], offset), E.const(q, "int32"), E.const(e, "int32") if e > 0 else None,
                          E.const(max(-e, 0), "int32"))
        return clamp_int8(E.add(y, E.const(attrs.requant.output_zero_point, "int32")), attrs.requant)

    return te.compute(out.shape, element, name="qmean")


qmean = register_op(
    "qnn.mean", type_rel=_mean_type, reference=_mean_ref, pattern=OpPattern.OPAQUE, compute=_mean_compute,
    attrs=QMeanAttrs, num_inputs=1, doc="int8 mean over axes with LiteRT's requantisation (TFLite MEAN).",
)
