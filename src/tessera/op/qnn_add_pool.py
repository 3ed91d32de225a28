"""Quantized addition and average pooling: ``qnn.add`` and ``qnn.avg_pool2d``.

Both come from `transform.quantize_to_integer` like the rest of `op.qnn`,
and requantise the same way (`Requant`); exact ties round to even, as ONNX's
QuantizeLinear does, because pooling's multipliers are often exact. With
``Rounding.TFLITE`` they follow LiteRT's int8 ADD and AVERAGE_POOL_2D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, broadcast_indices, broadcast_shapes
from .nn.pool import PoolAttrs, pool_type
from .qnn import INT8, Requant, check_int8, clamp_int8, requantize_expr, requantize_ref
from .qnn_rounding import Rounding, TFLiteAddScales, divide_half_away_expr, divide_half_away_ref, scaled_expr, \
    scaled_ref
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


@dataclass(frozen=True)
class QAddAttrs:
    """y = requant((a - za) * ma + (b - zb) * mb): the multipliers share `requant.shift`
    (with `requant.rounding` TFLITE, `tflite` holds LiteRT's multipliers instead)."""

    a_zero_point: int
    a_multiplier: int
    b_zero_point: int
    b_multiplier: int
    requant: Requant
    tflite: TFLiteAddScales | None = None


def _qadd_type(types: tuple[Type, ...], attrs: QAddAttrs) -> Type:
    a, b = (as_tensor(t) for t in types)
    check_int8((a, b), "qnn.add")
    if attrs.tflite is not None:  # LiteRT's ADD broadcasts
        return TensorType(broadcast_shapes(a.shape, b.shape), "int8")
    if a.shape != b.shape:
        raise TypeInferenceError(f"qnn.add needs equal shapes, got {a.shape} and {b.shape}")
    return a


def _qadd_ref(args: list[np.ndarray], attrs: QAddAttrs) -> np.ndarray:
    a, b = (v.astype(np.int64) for v in args)
    t, r = attrs.tflite, attrs.requant
    if t is not None:
        total = scaled_ref((a - attrs.a_zero_point) << t.left_shift, t.a) + \
            scaled_ref((b - attrs.b_zero_point) << t.left_shift, t.b)
        y = scaled_ref(total, t.out) + r.output_zero_point
        return np.clip(np.clip(y, *INT8), r.lo, r.hi).astype(np.int8)
    total = (a - attrs.a_zero_point) * attrs.a_multiplier + (b - attrs.b_zero_point) * attrs.b_multiplier
    r = attrs.requant
    return requantize_ref(total, np.ones((), np.int64), r.shift, r.output_zero_point, r.lo, r.hi, half_even=True)


def _qadd_compute(inputs: list[te.Tensor], attrs: QAddAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    a, b = inputs
    r = attrs.requant

    def term(t: te.Tensor, i: tuple[E.Var, ...], zp: int, m: int) -> E.PrimExpr:
        return E.mul(E.cast(E.sub(E.cast(t[i], "int32"), E.const(zp, "int32")), "int64"), E.const(m, "int64"))

    def tflite_term(t: te.Tensor, i: tuple[E.Var, ...], zp: int, qe: tuple[int, int], left: int) -> E.PrimExpr:
        value = E.cast(t[broadcast_indices(i, t.shape)], "int32")
        shifted = E.binary(E.BinOp.SHL, E.sub(value, E.const(zp, "int32")), E.const(left, "int32"))
        return scaled_expr(shifted, qe)

    def element(*i: E.Var) -> E.PrimExpr:
        tfl = attrs.tflite
        if tfl is not None:
            total32 = E.add(tflite_term(a, i, attrs.a_zero_point, tfl.a, tfl.left_shift),
                            tflite_term(b, i, attrs.b_zero_point, tfl.b, tfl.left_shift))
            return clamp_int8(E.add(scaled_expr(total32, tfl.out), E.const(r.output_zero_point, "int32")), r)
        total = E.add(term(a, i, attrs.a_zero_point, attrs.a_multiplier), term(b, i, attrs.b_zero_point, attrs.b_multiplier))
        return requantize_expr(total, r, half_even=True)

    return te.compute(out.shape, element, name="qadd")


qadd = register_op(
    "qnn.add", type_rel=_qadd_type, reference=_qadd_ref, pattern=OpPattern.ELEMWISE,
    compute=_qadd_compute, attrs=QAddAttrs, num_inputs=2,
    doc="int8 addition of two tensors with their own scales, fixed-point requantisation.",
)


@dataclass(frozen=True)
class QPoolAttrs:
    """Average pooling without padding: y = requant(sum(x - zp_in) * multiplier).

    With `requant.rounding` TFLITE, LiteRT's int8 average pool: the raw sum (input and
    output quantisation are equal, `input_zero_point` 0) divided by the window size,
    rounding half away from zero; `multiplier` is unused."""

    pool: PoolAttrs
    input_zero_point: int
    multiplier: int
    requant: Requant


def _qpool_type(types: tuple[Type, ...], attrs: QPoolAttrs) -> Type:
    x = as_tensor(types[0])
    check_int8((x,), "qnn.avg_pool2d")
    if any(attrs.pool.padding) or attrs.pool.ceil_mode or any(d != 1 for d in attrs.pool.dilation):
        raise TypeInferenceError(f"qnn.avg_pool2d supports unpadded, undilated windows, got {attrs.pool}")
    return pool_type(types, attrs.pool)


def _qpool_ref(args: list[np.ndarray], attrs: QPoolAttrs) -> np.ndarray:
    x = args[0].astype(np.int64) - attrs.input_zero_point
    p = attrs.pool
    (kh, kw), (sh, sw) = p.kernel, p.strides
    n, c, h, w = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    total = np.zeros((n, c, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            total += x[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
    r = attrs.requant
    if r.rounding is Rounding.TFLITE:
        return np.clip(divide_half_away_ref(total, kh * kw), max(r.lo, INT8[0]), min(r.hi, INT8[1])).astype(np.int8)
    return requantize_ref(total * attrs.multiplier, np.ones((), np.int64), r.shift, r.output_zero_point,
                          r.lo, r.hi, half_even=True)


def _qpool_compute(inputs: list[te.Tensor], attrs: QPoolAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    p = attrs.pool
    rk = [te.reduce_axis(k, f"rk{j}") for j, k in enumerate(p.kernel)]
    zp = E.const(attrs.input_zero_point, "int32")

    def window(n: E.Var, c: E.Var, oh: E.Var, ow: E.Var) -> E.PrimExpr:
        v = x[n, c, E.add(E.mul(oh, p.strides[0]), rk[0].var), E.add(E.mul(ow, p.strides[1]), rk[1].var)]
        return te.sum(E.sub(E.cast(v, "int32"), zp), rk)

    total = te.compute(out.shape, window, name="qpool_sum", axis_names=["n", "c", "o0", "o1"])

    return te.compute(out.shape, lambda *i: pool_requantize(total[i], attrs), name="qpool")


def pool_requantize(total: E.PrimExpr, attrs: QPoolAttrs) -> E.PrimExpr:
    """A window's int32 sum (zero point removed) as the int8 average, in `attrs.requant.rounding`."""
    if attrs.requant.rounding is Rounding.TFLITE:
        return clamp_int8(divide_half_away_expr(total, math.prod(attrs.pool.kernel)), attrs.requant)
    product = E.mul(E.cast(total, "int64"), E.const(attrs.multiplier, "int64"))
    return requantize_expr(product, attrs.requant, half_even=True)


qavg_pool2d = register_op(
    "qnn.avg_pool2d", type_rel=_qpool_type, reference=_qpool_ref, pattern=OpPattern.OPAQUE,
    compute=_qpool_compute, attrs=QPoolAttrs, num_inputs=1,
    doc="int8 average pooling (no padding) with requantisation to the output's scale.",
)
