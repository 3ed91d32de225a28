"""Quantized operators (``qnn.*``): int8 tensors with integer arithmetic.

Two kinds:

* the boundary ops ``qnn.quantize`` / ``qnn.dequantize``, ONNX's
  QuantizeLinear / DequantizeLinear (float at run time, as ONNX defines
  them: ``q = saturate(round_half_even(x / scale) + zp)`` and
  ``x = (q - zp) * scale``); scale and zero point are inputs, per tensor
  (one element) or per channel along ``axis``;
* integer kernels made by `transform.quantize_to_integer` from
  dequantize -> float op -> quantize: ``qnn.conv2d``, ``qnn.dense``,
  ``qnn.add``, ``qnn.avg_pool2d`` (the last two in `op.qnn_add_pool`). They accumulate int8 x int8 in int32 and
  requantise in fixed point, no float at run time:
  ``y = clamp(((acc * m + 2^(s-1)) >> s) + zp_out, lo, hi)`` with a 64-bit
  product, ``m < 2^31`` per output channel (an input tensor) and one shift
  ``s`` per op (an attribute). Relu / Clip fused into a kernel only move
  ``lo`` / ``hi``.

Rounding: the fixed-point multiplier carries at least 24 significant bits
(float32's precision) whenever the channel scales of one op span less than
2^7, so results differ from onnxruntime's float requantisation only where
``acc * M`` lies within about 2^-24 (relative) of a half (see
docs/quantization.md). ``half_even`` makes exact ties round to even, as ONNX's
QuantizeLinear does; pooling, whose multipliers are often exact, uses it.

With ``Rounding.TFLITE`` (models from the TFLite importer) every op instead
reproduces LiteRT's integer arithmetic bit for bit (`op.qnn_rounding`): the
quantize rounds half away from zero, conv2d / dense take their multipliers as
an int32 (3, C) table of Q31 multipliers, left and right shifts, add and
average pooling follow LiteRT's int8 kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, normalize_axis
from .nn.conv import ConvAttrs, conv_reference, conv_type_rel
from .nn.conv_schedule import pad_input
from .qnn_rounding import Rounding, multiply_expr, multiply_ref, rescale_double_expr, rescale_double_ref, \
    round_half_away_expr, round_half_away_ref
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext

INT8 = (-128, 127)


# ------------------------------------------------------------ fixed point
def fixed_point(multipliers: np.ndarray | list[float], limit_bits: int = 31) -> tuple[np.ndarray, int]:
    """Integers m and one shift s with m / 2^s ~ multipliers and every |m| < 2^limit_bits."""
    reals = np.asarray(multipliers, dtype=np.float64).reshape(-1)
    top = float(np.max(np.abs(reals))) if reals.size else 0.0
    if not top > 0:
        return np.zeros(reals.shape, np.int32), 1
    shift = limit_bits - 1 - math.floor(math.log2(top))
    shift = min(shift, 62)
    while np.max(np.abs(np.round(reals * 2.0**shift))) >= 2**limit_bits:
        shift -= 1
    if shift < 1:
        raise ValueError(f"requantisation multiplier {top} is too large for fixed point (max 2^30)")
    return np.round(reals * 2.0**shift).astype(np.int64).astype(np.int32), shift


def requantize_ref(acc: np.ndarray, m: np.ndarray, shift: int, zp: int, lo: int, hi: int,
                   half_even: bool = False) -> np.ndarray:
    """NumPy reference of the fixed-point requantisation (exact, int64)."""
    p = acc.astype(np.int64) * m.astype(np.int64)
    q = (p + (1 << (shift - 1))) >> shift
    if half_even:
        tie = (p & ((1 << shift) - 1)) == (1 << (shift - 1))
        q = np.where(tie, q & ~1, q)
    return np.clip(q + zp, lo, hi).astype(np.int8)


@dataclass(frozen=True)
class Requant:
    """The fixed-point epilogue shared by the integer kernels (multipliers are an input)."""

    shift: int
    output_zero_point: int
    lo: int = INT8[0]
    hi: int = INT8[1]
    rounding: Rounding = Rounding.ONNX  # TFLITE: the multipliers operand is a (3, C) table, `shift` is unused
    left_shifts: bool = False  # TFLITE: apply the table's left shifts (all zero otherwise: 32 x 32-bit products)


def clamp_int8(y: E.PrimExpr, r: Requant) -> E.PrimExpr:
    """An int32 value saturated to int8, then to a fused activation's [lo, hi], as int8."""
    y = E.minimum(E.maximum(y, E.const(INT8[0], "int32")), E.const(INT8[1], "int32"))
    if r.lo > INT8[0]:
        y = E.maximum(y, E.const(r.lo, "int32"))
    if r.hi < INT8[1]:
        y = E.minimum(y, E.const(r.hi, "int32"))
    return E.cast(y, "int8")


def requantize_expr(product: E.PrimExpr, r: Requant, half_even: bool = False) -> E.PrimExpr:
    """TIR of `requantize_ref` for an int64 product p = acc * m: (p + 2^(s-1)) >> s, plus the
    output zero point, clamped to [lo, hi] as int8 (`half_even`: exact ties round to even)."""
    half = E.const(1 << (r.shift - 1), "int64")
    q = E.binary(E.BinOp.SHR, E.add(product, half), E.const(r.shift, "int64"))
    if half_even:
        tie = E.eq(E.binary(E.BinOp.BITAND, product, E.const((1 << r.shift) - 1, "int64")), half)
        q = E.select(tie, E.binary(E.BinOp.BITAND, q, E.const(-2, "int64")), q)
    y = E.add(E.cast(q, "int32"), E.const(r.output_zero_point, "int32"))
    # saturate to int8 first (one SSAT on Cortex-M), then the tighter bounds of a fused activation
    return clamp_int8(y, r)


def channel_requantize(acc: E.PrimExpr, mult: "te.Tensor", c: E.PrimExpr, r: Requant) -> E.PrimExpr:
    """The int32 accumulator `acc` of output channel `c` requantised to int8, in `r.rounding`."""
    if r.rounding is Rounding.TFLITE and mult.dtype == "float64":
        y = rescale_double_expr(acc, _channel(mult, c))
        return clamp_int8(E.add(y, E.const(r.output_zero_point, "int32")), r)
    if r.rounding is Rounding.TFLITE:
        k = E.IntImm(0) if mult.shape[1] == 1 else c
        left = mult[E.IntImm(1), k] if r.left_shifts else None
        y = multiply_expr(acc, mult[E.IntImm(0), k], left, mult[E.IntImm(2), k])
        return clamp_int8(E.add(y, E.const(r.output_zero_point, "int32")), r)
    return requantize_expr(widening_product(acc, _channel(mult, c)), r)


def channel_requantize_ref(acc: np.ndarray, mult: np.ndarray, channel_axis: int, r: Requant) -> np.ndarray:
    """NumPy of `channel_requantize` for accumulators with channels along `channel_axis`."""
    def along(v: np.ndarray) -> np.ndarray:
        shape = [1] * acc.ndim
        shape[channel_axis] = v.size
        return v.reshape(shape)

    if r.rounding is Rounding.TFLITE and mult.dtype == np.float64:
        y = rescale_double_ref(acc, along(mult)) + r.output_zero_point
        return np.clip(np.clip(y, *INT8), r.lo, r.hi).astype(np.int8)
    if r.rounding is Rounding.TFLITE:
        left = along(mult[1]) if r.left_shifts else np.zeros((), np.int64)
        y = multiply_ref(acc, along(mult[0]), left, along(mult[2])) + r.output_zero_point
        return np.clip(np.clip(y, *INT8), r.lo, r.hi).astype(np.int8)
    return requantize_ref(acc, along(mult), r.shift, r.output_zero_point, r.lo, r.hi)


def widening_product(acc: E.PrimExpr, m: E.PrimExpr) -> E.PrimExpr:
    """acc * m in 64 bits, for an int32 accumulator and an int32 multiplier."""
    return E.mul(E.cast(acc, "int64"), E.cast(m, "int64"))


def _channel(t: te.Tensor, c: E.PrimExpr) -> E.PrimExpr:
    """Element c of a per-channel vector, or its only element."""
    return t[E.IntImm(0) if t.shape[0] == 1 else c]


# ------------------------------------------------------ quantize / dequantize
@dataclass(frozen=True)
class QuantizeAttrs:
    axis: int = 1
    out_dtype: str = "int8"
    rounding: Rounding = Rounding.ONNX  # TFLITE: half away from zero (and the integer ops made from it follow LiteRT)


@dataclass(frozen=True)
class DequantizeAttrs:
    axis: int = 1


def _params_check(x: TensorType, scale: TensorType, zp: TensorType, axis: int, what: str) -> None:
    if scale.ndim > 1 or zp.shape != scale.shape:
        raise TypeInferenceError(f"{what}: scale and zero point must be scalars or matching 1-d vectors, "
                                 f"got {scale.shape} and {zp.shape}")
    if scale.dtype != "float32":
        raise TypeInferenceError(f"{what}: scale must be float32, got {scale.dtype}")
    size = math.prod(scale.shape)
    if size != 1 and (x.ndim == 0 or size != x.shape[normalize_axis(axis, x.ndim)]):
        raise TypeInferenceError(f"{what}: {size} scales do not match axis {axis} of {x.shape}")


def _quantize_type(types: tuple[Type, ...], attrs: QuantizeAttrs) -> Type:
    x, scale, zp = (as_tensor(t) for t in types)
    _params_check(x, scale, zp, attrs.axis, "qnn.quantize")
    if x.dtype != "float32":
        raise TypeInferenceError(f"qnn.quantize takes float32, got {x.dtype}")
    if attrs.out_dtype not in ("int8", "uint8") or zp.dtype != attrs.out_dtype:
        raise TypeInferenceError(f"qnn.quantize: output {attrs.out_dtype} with a {zp.dtype} zero point; "
                                 "expected int8 or uint8 for both")
    return TensorType(x.shape, attrs.out_dtype)


def _dequantize_type(types: tuple[Type, ...], attrs: DequantizeAttrs) -> Type:
    x, scale, zp = (as_tensor(t) for t in types)
    _params_check(x, scale, zp, attrs.axis, "qnn.dequantize")
    if x.dtype not in ("int8", "uint8", "int32") or zp.dtype != x.dtype:
        raise TypeInferenceError(f"qnn.dequantize takes int8, uint8 or int32 with a zero point of the same "
                                 f"dtype, got {x.dtype} and {zp.dtype}")
    return TensorType(x.shape, "float32")


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if v.size == 1 or ndim == 0:
        return v.reshape(())
    shape = [1] * ndim
    shape[normalize_axis(axis, ndim)] = v.size
    return v.reshape(shape)


def _quantize_ref(args: list[np.ndarray], attrs: QuantizeAttrs) -> np.ndarray:
    x, scale, zp = args
    info = np.iinfo(attrs.out_dtype)
    v = x.astype(np.float32) / _along(scale, x.ndim, attrs.axis)
    rounded = round_half_away_ref(np.clip(v, -1024, 1024)) if attrs.rounding is Rounding.TFLITE else np.rint(v)
    q = rounded.astype(np.float64)
    q = q + _along(zp, x.ndim, attrs.axis).astype(np.float64)
    return np.clip(q, info.min, info.max).astype(attrs.out_dtype)


def _dequantize_ref(args: list[np.ndarray], attrs: DequantizeAttrs) -> np.ndarray:
    x, scale, zp = args
    diff = x.astype(np.int64) - _along(zp, x.ndim, attrs.axis).astype(np.int64)
    return (diff.astype(np.float32) * _along(scale, x.ndim, attrs.axis)).astype(np.float32)


def _param_at(t: te.Tensor, index: tuple[E.PrimExpr, ...], axis: int) -> E.PrimExpr:
    if t.shape[0] == 1:
        return t[E.IntImm(0)]
    return t[index[normalize_axis(axis, len(index))]]


def _quantize_compute(inputs: list[te.Tensor], attrs: QuantizeAttrs, out: TensorType,
                      sched: ScheduleContext) -> te.Tensor:
    x, scale, zp = inputs
    lo, hi = (-128, 127) if attrs.out_dtype == "int8" else (0, 255)

    def element(*i: E.Var) -> E.PrimExpr:
        v = E.div(x[i], _param_at(scale, i, attrs.axis))
        if attrs.rounding is Rounding.TFLITE:  # clamped first: beyond +-1024 every zero point saturates anyway
            r = round_half_away_expr(E.minimum(E.maximum(v, E.const(-1024.0, "float32")), E.const(1024.0, "float32")))
        else:
            r = E.call(E.Intrinsic.ROUND, [v], "float32")
        v = E.add(r, E.cast(_param_at(zp, i, attrs.axis), "float32"))
        return E.cast(E.minimum(E.maximum(v, E.const(lo, "float32")), E.const(hi, "float32")), attrs.out_dtype)

    return te.compute(out.shape, element, name="quantize")


def _dequantize_compute(inputs: list[te.Tensor], attrs: DequantizeAttrs, out: TensorType,
                        sched: ScheduleContext) -> te.Tensor:
    x, scale, zp = inputs

    def element(*i: E.Var) -> E.PrimExpr:
        diff = E.sub(E.cast(x[i], "int32"), E.cast(_param_at(zp, i, attrs.axis), "int32"))
        return E.mul(E.cast(diff, "float32"), _param_at(scale, i, attrs.axis))

    return te.compute(out.shape, element, name="dequantize")


quantize = register_op(
    "qnn.quantize", type_rel=_quantize_type, reference=_quantize_ref, pattern=OpPattern.ELEMWISE,
    compute=_quantize_compute, attrs=QuantizeAttrs, num_inputs=3,
    doc="ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point).",
)


dequantize = register_op(
    "qnn.dequantize", type_rel=_dequantize_type, reference=_dequantize_ref, pattern=OpPattern.ELEMWISE,
    compute=_dequantize_compute, attrs=DequantizeAttrs, num_inputs=3, foldable=False,
    doc="ONNX DequantizeLinear: (x - zero_point) * scale. Not folded on constants: "
        "QuantizeToInteger needs the int8 weights (it folds what it leaves).",
)


# ------------------------------------------------------------ requantised ops
@dataclass(frozen=True)
class QConvAttrs:
    """The weight is stored flat, (OC, IC / groups * KH * KW), so each output
    channel's weights are one contiguous run for the dot-product kernel."""

    conv: ConvAttrs
    kernel: tuple[int, int]
    input_zero_point: int
    requant: Requant


@dataclass(frozen=True)
class QDenseAttrs:
    input_zero_point: int
    requant: Requant


def check_int8(types: tuple[TensorType, ...], what: str) -> None:
    for k, t in enumerate(types):
        if t.dtype != "int8":
            raise TypeInferenceError(f"{what}: input {k} must be int8, got {t.dtype}")


def _check_channel_vectors(bias: TensorType, mult: TensorType, channels: int, what: str, r: Requant,
                           double_scales: bool = False) -> None:
    """Multipliers: int32 (C,) (or (1,)); with TFLITE rounding an int32 (3, C) table, or for dense
    float64 (C,) scales (LiteRT's double-precision FULLY_CONNECTED)."""
    shapes: tuple[tuple[int, ...], ...]
    if double_scales and r.rounding is Rounding.TFLITE and mult.dtype == "float64":
        shapes, mult_dtype = ((channels,), (1,)), "float64"
    elif r.rounding is Rounding.TFLITE:
        shapes, mult_dtype = ((3, channels), (3, 1)), "int32"
    else:
        shapes, mult_dtype = ((channels,), (1,)), "int32"
    if bias.dtype != "int32" or mult.dtype != mult_dtype or bias.shape != (channels,) or mult.shape not in shapes:
        raise TypeInferenceError(f"{what}: bias must be int32 ({channels},) and multipliers int32 {shapes[0]} "
                                 f"or {shapes[1]}; got {bias.dtype} {bias.shape} and {mult.dtype} {mult.shape}")


_conv2d_shape = conv_type_rel(2)


def _weight4(w: TensorType | np.ndarray, attrs: QConvAttrs, ic: int) -> tuple[int, ...]:
    return (w.shape[0], ic // attrs.conv.groups, *attrs.kernel)


def _qconv_type(types: tuple[Type, ...], attrs: QConvAttrs) -> Type:
    x, w, bias, mult = (as_tensor(t) for t in types)
    check_int8((x, w), "qnn.conv2d")
    if x.ndim != 4 or w.ndim != 2 or w.shape[1] != x.shape[1] // attrs.conv.groups * math.prod(attrs.kernel):
        raise TypeInferenceError(f"qnn.conv2d needs NCHW data and a flat (OC, C/groups*KH*KW) weight, "
                                 f"got {x.shape} and {w.shape} for kernel {attrs.kernel}")
    out = _conv2d_shape((x, TensorType(_weight4(w, attrs, x.shape[1]), "int8")), attrs.conv)
    assert isinstance(out, TensorType)
    _check_channel_vectors(bias, mult, w.shape[0], "qnn.conv2d", attrs.requant)
    return out


def weight_sums(w: np.ndarray) -> np.ndarray:
    """Sum of each output channel's weights: input_zero_point * sum is what padding-free raw products add."""
    return w.reshape(w.shape[0], -1).astype(np.int64).sum(axis=1)


def _qconv_ref(args: list[np.ndarray], attrs: QConvAttrs) -> np.ndarray:
    """acc = sum over the window of x * w (padding reads the zero point) + bias."""
    x, w, bias, mult = args
    w4 = w.reshape(_weight4(w, attrs, x.shape[1])).astype(np.int64)
    zp = attrs.input_zero_point
    acc = conv_reference([x.astype(np.int64) - zp, w4], attrs.conv)
    acc = acc + (bias.astype(np.int64) + zp * weight_sums(w)).reshape(1, -1, 1, 1)
    return channel_requantize_ref(acc, mult, 1, attrs.requant)


def _im2col(padded: te.Tensor, attrs: QConvAttrs, out: TensorType) -> te.Tensor:
    """col[n, y, x, c, ky, kx]: the window of output position (y, x) as one contiguous run of
    K = C*KH*KW (six loops, so no index is divided per byte). The loops run over (c, ky) outside
    (x, kx): each inner run reads one input row front to back and gcc compiles it to plain byte
    moves (in the order x, c, ky, kx it packed bytes into words with BFI; this order takes about
    1% fewer instructions on ResNet-8 on a Cortex-M4)."""
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.conv.strides, attrs.conv.dilation
    _, _, oh, ow = out.shape

    def element(n: E.Var, y: E.Var, x: E.Var, c: E.Var, ky: E.Var, kx: E.Var) -> E.PrimExpr:
        return padded[n, c, E.add(E.mul(y, sh), E.mul(ky, dh)), E.add(E.mul(x, sw), E.mul(kx, dw))]

    return te.compute((out.shape[0], oh, ow, padded.shape[1], kh, kw), element, name="im2col",
                      axis_names=["n", "y", "x", "c", "ky", "kx"], loop_order=["n", "y", "c", "ky", "x", "kx"],
                      materialize=True)


def dot_s8(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """int8 x int8 -> int32; a reduction of these along contiguous runs becomes `ts_dot_int8` in C."""
    return E.mul(E.cast(a, "int32"), E.cast(b, "int32"))


def _qconv_compute(inputs: list[te.Tensor], attrs: QConvAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    """One fused kernel: each output element's int32 sum stays in a local accumulator and is
    requantised straight to int8 (see `te.lower`: no int32 tensor is ever stored)."""
    data, weight, bias, mult = inputs
    a = attrs.conv
    n, oc, oh, ow = out.shape
    padded = pad_input(data, a.padding[:2], a.padding[2:], attrs.input_zero_point, materialize=True)
    if a.groups == 1:
        # im2col, then one contiguous int8 dot product per output: SMLAD / MVE friendly
        col = _im2col(padded, attrs, out)
        rk = te.reduce_axis(weight.shape[1], "rk")

        def window(b: E.Var, c: E.Var, y: E.Var, x: E.Var) -> E.PrimExpr:
            # col's window at (y, x) read by flat offset: rk runs over its c, ky and kx
            return te.sum(dot_s8(col[b, y, x, 0, 0, rk.var], weight[c, rk.var]), rk)
    else:
        (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, a.strides, a.dilation
        icpg = data.shape[1] // a.groups
        ocpg = oc // a.groups
        rc, ry, rx = te.reduce_axis(icpg, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

        def window(b: E.Var, c: E.Var, y: E.Var, x: E.Var) -> E.PrimExpr:
            channel = E.add(E.mul(E.floordiv(c, ocpg), icpg), rc.var) if icpg > 1 or ocpg > 1 else c
            pixel = padded[b, channel, E.add(E.mul(y, sh), E.mul(ry.var, dh)), E.add(E.mul(x, sw), E.mul(rx.var, dw))]
            tap = E.add(E.mul(E.add(E.mul(rc.var, kh), ry.var), kw), rx.var)
            return te.sum(dot_s8(pixel, weight[c, tap]), [rc, ry, rx])
    # im2col: channels innermost, so the C generator pairs them and two weight rows share each window's loads
    order = ["n", "o0", "o1", "c", "rk"] if a.groups == 1 else None
    acc = te.compute(out.shape, window, name="qconv2d", axis_names=["n", "c", "o0", "o1"], loop_order=order)
    r = attrs.requant

    def element(b: E.Var, c: E.Var, y: E.Var, x: E.Var) -> E.PrimExpr:
        return channel_requantize(E.add(acc[b, c, y, x], bias[c]), mult, c, r)

    return te.compute(out.shape, element, name="requantize", axis_names=["n", "c", "o0", "o1"])


# OUT_ELEMWISE_FUSABLE: a residual qnn.add (or other elementwise tail) runs in the requantising epilogue,
# so the convolution's int8 output is never stored
qconv2d = register_op(
    "qnn.conv2d", type_rel=_qconv_type, reference=_qconv_ref, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    compute=_qconv_compute, attrs=QConvAttrs, num_inputs=4,
    doc="int8 2-d convolution (NCHW, flat symmetric weights), int32 accumulation of raw products with the "
        "input zero point folded into the bias, fixed-point requantisation.",
)


def _qdense_type(types: tuple[Type, ...], attrs: QDenseAttrs) -> Type:
    x, w, bias, mult = (as_tensor(t) for t in types)
    check_int8((x, w), "qnn.dense")
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise TypeInferenceError(f"qnn.dense needs data (M, K) and weight (N, K), got {x.shape} and {w.shape}")
    _check_channel_vectors(bias, mult, w.shape[0], "qnn.dense", attrs.requant, double_scales=True)
    return TensorType((x.shape[0], w.shape[0]), "int8")


def _qdense_ref(args: list[np.ndarray], attrs: QDenseAttrs) -> np.ndarray:
    """acc = x @ w.T + bias (raw products: the bias holds -input_zero_point * sum(w))."""
    x, w, bias, mult = args
    acc = x.astype(np.int64) @ w.astype(np.int64).T + bias.astype(np.int64)
    return channel_requantize_ref(acc, mult, 1, attrs.requant)


def _qdense_compute(inputs: list[te.Tensor], attrs: QDenseAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x, w, bias, mult = inputs
    rk = te.reduce_axis(x.shape[1], "rk")
    acc = te.compute(out.shape, lambda m, n: te.sum(dot_s8(x[m, rk.var], w[n, rk.var]), rk), name="qdense",
                     axis_names=["m", "n"])
    r = attrs.requant

    def element(m: E.Var, n: E.Var) -> E.PrimExpr:
        return channel_requantize(E.add(acc[m, n], bias[n]), mult, n, r)

    return te.compute(out.shape, element, name="requantize", axis_names=["m", "n"])


qdense = register_op(
    "qnn.dense", type_rel=_qdense_type, reference=_qdense_ref, pattern=OpPattern.OPAQUE,
    compute=_qdense_compute, attrs=QDenseAttrs, num_inputs=4,
    doc="int8 x (M, K) times int8 weight (N, K) transposed, raw int32 products plus a bias that folds the "
        "input zero point, fixed-point requantisation.",
)
