"""QuantizeToInteger: dequantize -> float op -> quantize becomes one integer kernel.

A quantised ONNX model (QDQ, or operator form as the importer canonicalises
it) computes every layer as ``quantize(f(dequantize(x), dequantize(W)))``.
Starting from each `qnn.quantize`, this pass matches the float op below it
and, when every operand is a dequantised int8 tensor with constant
parameters, replaces the three by an integer op of `op.qnn`:

| float pattern under `quantize`                              | becomes           |
| ----------------------------------------------------------- | ----------------- |
| [relu] (conv2d(dq x, dq W) [+ reshape(dq bias)])             | `qnn.conv2d`      |
| [relu] (dense(dq x, dq W) or matmul(dq x, dq W) [+ dq bias]) | `qnn.dense`       |
| [relu] (add(dq a, dq b))                                     | `qnn.add`         |
| avg_pool2d(dq x) without padding, mean(dq x) over H and W    | `qnn.avg_pool2d`  |
| reshape / transpose (dq x) with the same scale and zero point | the op on int8   |

The real multiplier of each output channel (input scale x weight scale /
output scale, in float64 from the float32 scales) becomes a fixed-point
int32 multiplier and one shift (`op.qnn.fixed_point`); int32 biases are
rescaled from their own scale (equal to input x weight scale in models from
onnxruntime, so they stay as they are). Relu after the op only raises the
lower clamp to the output zero point (``quantize(relu(v)) == max(quantize(v), zp)``).

A quantize made by the TFLite importer (``Rounding.TFLITE``) picks the
rules at the end of this file instead: the same integer ops, computing what
LiteRT's int8 kernels compute (per-channel Q31 multipliers and exponents,
its ADD, MUL, MEAN and AVERAGE_POOL_2D arithmetic, the model's own int32 biases, and
fused ReLU / ReLU6 bounds as LiteRT rounds them).

Anything else (softmax, uint8 or asymmetric weights, padded average pools)
keeps its float form, which is exactly what ONNX defines, and runs as a fused
dequantize -> op -> quantize kernel with float arithmetic. Dequantised
constants left over are folded to float constants at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..op import elemwise as ew
from ..op import qnn
from ..op import qnn_add_pool as qap
from ..op import qnn_tflite
from ..op import reduce as red
from ..op import transform as tf
from ..op.nn import conv as conv_ops
from ..op.nn import matmul as mm
from ..op.nn import pool
from ..op.elemwise_activation import ClipAttrs
from ..op.nn.pool import PoolAttrs
from ..op.qnn_rounding import Rounding, TFLiteAddScales, multiplier_table, quantize_multiplier
from ..op.registry import Op
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import rewrite
from .fold_constant import fold_expr
from .infer_type import infer_expr, infer_function
from .pass_infra import FunctionPass, PassContext


@dataclass(frozen=True)
class Dequantized:
    """`x` (int8) with its constant scale and zero point."""

    x: Expr
    scale: np.ndarray  # float64, 1 or per-channel values
    zero_point: np.ndarray  # int64
    axis: int

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    @property
    def s(self) -> float:
        return float(self.scale.reshape(-1)[0])

    @property
    def zp(self) -> int:
        return int(self.zero_point.reshape(-1)[0])


def _dequantized(e: Expr, dtype: str = "int8") -> Dequantized | None:
    if not (isinstance(e, Call) and e.op is qnn.dequantize):
        return None
    x, scale, zp = e.args
    if not isinstance(scale, Constant) or not isinstance(zp, Constant):
        return None
    ty = x.checked_type_
    if not isinstance(ty, TensorType) or ty.dtype != dtype:
        return None
    return Dequantized(x, scale.data.astype(np.float64).reshape(-1), zp.data.astype(np.int64).reshape(-1),
                       e.attrs_as(qnn.DequantizeAttrs).axis)


def _shape(e: Expr) -> tuple[int, ...]:
    ty = e.checked_type
    if not isinstance(ty, TensorType):
        raise TypeError(f"expected a tensor, got {ty}")
    return ty.shape


def _call(e: Expr, *ops: Op) -> Call | None:
    return e if isinstance(e, Call) and e.op in ops else None


def _strip_relu(y: Expr) -> tuple[Expr, bool]:
    relu = _call(y, ew.relu)
    return (relu.args[0], True) if relu is not None else (y, False)


def _bias(e: Expr | None, expected: np.ndarray, channels: int) -> np.ndarray | None:
    """The int32 bias in units of `expected` (input x weight scale per channel), or None if it is not one."""
    if e is None:
        return np.zeros(channels, np.int32)
    reshaped = _call(e, tf.reshape)
    if reshaped is not None:
        e = reshaped.args[0]
    b = _dequantized(e, "int32")
    if b is None or not isinstance(b.x, Constant) or np.any(b.zero_point != 0):
        return None
    q = b.x.data.astype(np.float64).reshape(-1)
    if q.size != channels:
        return None
    value = np.round(q * np.broadcast_to(b.scale, (channels,)) / expected)
    if np.max(np.abs(value), initial=0) >= 2**31:
        return None
    return value.astype(np.int32)


def _weight(d: Dequantized | None, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Constant symmetric int8 weights and their per-output-channel scales."""
    if d is None or not isinstance(d.x, Constant) or np.any(d.zero_point != 0):
        return None
    w = d.x.data
    if not d.per_tensor and d.axis % w.ndim != axis:
        return None
    return w, np.broadcast_to(d.scale, (w.shape[axis],)).astype(np.float64)


def _requant(out_scale: float, out_zp: int, multipliers: np.ndarray, relu: bool) -> tuple[qnn.Requant, Constant]:
    m, shift = qnn.fixed_point(multipliers / out_scale)
    lo = max(qnn.INT8[0], out_zp) if relu else qnn.INT8[0]
    return qnn.Requant(shift, out_zp, lo, qnn.INT8[1]), Constant(m.astype(np.int32))


def _split_bias(y: Expr, product_ops: tuple[Op, ...]) -> tuple[Call | None, Expr | None]:
    add = _call(y, ew.add)
    if add is not None:
        for k in (0, 1):
            prod = _call(add.args[k], *product_ops)
            if prod is not None:
                return prod, add.args[1 - k]
        return None, None
    return _call(y, *product_ops), None


def _per_tensor_operands(y: Expr, op: Op) -> tuple[Dequantized, Dequantized] | None:
    """The two operands of `y`, a call of the binary `op`, when both are per-tensor dequantized values."""
    call = _call(y, op)
    if call is None:
        return None
    a, b = _dequantized(call.args[0]), _dequantized(call.args[1])
    if a is None or b is None or not a.per_tensor or not b.per_tensor:
        return None
    return a, b


def _conv_operands(y: Expr) -> tuple[Call, Dequantized, np.ndarray, np.ndarray, Expr | None] | None:
    """conv2d(dequantized x per tensor, dequantized constant weight) (+ bias): the call, x, the integer
    weight and its per-channel scales, and the bias expression; None for any other form."""
    conv, bias_expr = _split_bias(y, (conv_ops.conv2d,))
    if conv is None:
        return None
    x = _dequantized(conv.args[0])
    weight = _weight(_dequantized(conv.args[1]), 0)
    if x is None or not x.per_tensor or weight is None:
        return None
    return conv, x, weight[0], weight[1], bias_expr


def _zero_point_folded(bias: np.ndarray, x: Dequantized, w: np.ndarray) -> Constant | None:
    """The int32 bias that also holds -x.zp * sum(w) (qnn kernels add raw products), None on overflow."""
    folded = bias.astype(np.int64) - x.zp * qnn.weight_sums(w)
    return None if np.abs(folded).max() >= 2**31 else Constant(folded.astype(np.int32))


def _conv(y: Expr, out: Dequantized) -> Expr | None:
    y, relu = _strip_relu(y)
    parts = _conv_operands(y)
    if parts is None:
        return None
    conv, x, w, ws, bias_expr = parts
    bias = _bias(bias_expr, x.s * ws, w.shape[0])
    folded = None if bias is None else _zero_point_folded(bias, x, w)
    if folded is None:
        return None
    requant, mult = _requant(out.s, out.zp, x.s * ws, relu)
    attrs = qnn.QConvAttrs(conv.attrs_as(conv_ops.ConvAttrs), (w.shape[2], w.shape[3]), x.zp, requant)
    return Call(qnn.qconv2d, (x.x, Constant(w.reshape(w.shape[0], -1)), folded, mult), attrs)


def _dense(y: Expr, out: Dequantized) -> Expr | None:
    y, relu = _strip_relu(y)
    prod, bias_expr = _split_bias(y, (mm.dense, mm.matmul))
    if prod is None:
        return None
    x = _dequantized(prod.args[0])
    if x is None or not x.per_tensor or len(_shape(x.x)) != 2:
        return None
    transposed = prod.op is mm.matmul  # matmul's weight is (K, N)
    weight = _weight(_dequantized(prod.args[1]), 1 if transposed else 0)
    if weight is None or weight[0].ndim != 2:
        return None
    w, ws = weight
    if transposed:
        w = np.ascontiguousarray(w.T)
    bias = _bias(bias_expr, x.s * ws, w.shape[0])
    folded = None if bias is None else _zero_point_folded(bias, x, w)
    if folded is None:
        return None
    requant, mult = _requant(out.s, out.zp, x.s * ws, relu)
    return Call(qnn.qdense, (x.x, Constant(w), folded, mult), qnn.QDenseAttrs(x.zp, requant))


def _add(y: Expr, out: Dequantized) -> Expr | None:
    y, relu = _strip_relu(y)
    operands = _per_tensor_operands(y, ew.add)
    if operands is None:
        return None
    a, b = operands
    if isinstance(a.x, Constant) or isinstance(b.x, Constant) or a.x.checked_type != b.x.checked_type:
        return None
    m, shift = qnn.fixed_point([a.s / out.s, b.s / out.s])
    lo = max(qnn.INT8[0], out.zp) if relu else qnn.INT8[0]
    attrs = qap.QAddAttrs(a.zp, int(m[0]), b.zp, int(m[1]), qnn.Requant(shift, out.zp, lo, qnn.INT8[1]))
    return Call(qap.qadd, (a.x, b.x), attrs)


def _avg_pool(y: Expr, out: Dequantized) -> Expr | None:
    call = _call(y, pool.avg_pool2d, red.mean)
    if call is None:
        return None
    x = _dequantized(call.args[0])
    if x is None or not x.per_tensor:
        return None
    shape = _shape(x.x)
    if call.op is red.mean:
        reduce_attrs = call.attrs_as(red.ReduceAttrs)
        if len(shape) != 4 or sorted(a % 4 for a in reduce_attrs.axes) != [2, 3] or not reduce_attrs.keepdims:
            return None
        attrs = PoolAttrs(kernel=tuple(shape[2:]), strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    else:
        attrs = call.attrs_as(PoolAttrs)
        if any(attrs.padding) or attrs.ceil_mode or any(d != 1 for d in attrs.dilation):
            return None
    count = int(np.prod(attrs.kernel))
    m, shift = qnn.fixed_point([x.s / (out.s * count)])
    requant = qnn.Requant(shift, out.zp)
    return Call(qap.qavg_pool2d, (x.x,), qap.QPoolAttrs(attrs, x.zp, int(m[0]), requant))


def _injective(y: Expr, out: Dequantized) -> Expr | None:
    call = _call(y, tf.reshape, tf.transpose)
    if call is None:
        return None
    x = _dequantized(call.args[0])
    if x is None or not x.per_tensor or x.s != out.s or x.zp != out.zp:
        return None
    return Call(call.op, (x.x,), call.attrs)


# ---------------------------------------------------------------- LiteRT's arithmetic
def _activation_bounds(y: Expr, out: Dequantized) -> tuple[Expr, int, int]:
    """A fused ReLU / ReLU6 / ReLU_N1_TO_1 stripped, and its int8 bounds as LiteRT computes them."""
    def level(v: float) -> int:
        ratio = np.float32(v) / np.float32(out.s)  # float arithmetic, std::round
        return out.zp + int(np.sign(ratio) * np.floor(np.abs(ratio) + 0.5)) if abs(ratio) < 2**30 else (
            qnn.INT8[1] if ratio > 0 else qnn.INT8[0])

    lo, hi = qnn.INT8
    relu = _call(y, ew.relu)
    if relu is not None:
        return relu.args[0], max(lo, level(0.0)), hi
    clip = _call(y, ew.clip)
    if clip is not None:
        a = clip.attrs_as(ClipAttrs)
        return clip.args[0], max(lo, level(a.a_min)), min(hi, level(a.a_max))
    return y, lo, hi


def _raw_bias(e: Expr | None, channels: int) -> np.ndarray | None:
    """The model's int32 bias as it is (LiteRT adds it to the accumulator unchanged)."""
    if e is None:
        return np.zeros(channels, np.int64)
    reshaped = _call(e, tf.reshape)
    b = _dequantized(reshaped.args[0] if reshaped is not None else e, "int32")
    if b is None or not isinstance(b.x, Constant) or np.any(b.zero_point != 0) or b.x.data.size != channels:
        return None
    return b.x.data.astype(np.int64).reshape(-1)


def _tflite_requant(out: Dequantized, lo: int, hi: int, table: Constant | None = None) -> qnn.Requant:
    left_shifts = table is not None and table.data.dtype == np.int32 and bool(np.any(table.data[1] > 0))
    return qnn.Requant(31, out.zp, lo, hi, Rounding.TFLITE, left_shifts)


def _tflite_table(x: Dequantized, ws: np.ndarray, out: Dequantized) -> Constant:
    # double(input scale) * double(filter scale) / double(output scale), from the float32 scales
    return Constant(multiplier_table(x.s * ws / out.s))


def _tflite_conv(y: Expr, out: Dequantized) -> Expr | None:
    y, lo, hi = _activation_bounds(y, out)
    parts = _conv_operands(y)
    if parts is None:
        return None
    conv, x, w, ws, bias_expr = parts
    bias = _raw_bias(bias_expr, w.shape[0])
    folded = None if bias is None else _zero_point_folded(bias, x, w)
    if folded is None:
        return None
    table = _tflite_table(x, ws, out)
    attrs = qnn.QConvAttrs(conv.attrs_as(conv_ops.ConvAttrs), (w.shape[2], w.shape[3]), x.zp,
                           _tflite_requant(out, lo, hi, table))
    return Call(qnn.qconv2d, (x.x, Constant(w.reshape(w.shape[0], -1)), folded, table), attrs)


def _tflite_dense(y: Expr, out: Dequantized) -> Expr | None:
    y, lo, hi = _activation_bounds(y, out)
    prod, bias_expr = _split_bias(y, (mm.dense,))
    if prod is None:
        return None
    x = _dequantized(prod.args[0])
    w_dq = _dequantized(prod.args[1])
    weight = _weight(w_dq, 0)
    if x is None or not x.per_tensor or len(_shape(x.x)) != 2 or weight is None or weight[0].ndim != 2:
        return None
    weight_per_tensor = w_dq is not None and w_dq.per_tensor
    w, ws = weight
    bias = _raw_bias(bias_expr, w.shape[0])
    folded = None if bias is None else _zero_point_folded(bias, x, w)
    if folded is None:
        return None
    # LiteRT's reference FULLY_CONNECTED rescales in double precision, one rounding (see op.qnn_rounding)
    scales = Constant((x.s * (ws[:1] if weight_per_tensor else ws) / out.s).astype(np.float64))
    return Call(qnn.qdense, (x.x, Constant(w), folded, scales),
                qnn.QDenseAttrs(x.zp, _tflite_requant(out, lo, hi, scales)))


TFLITE_ADD_LEFT_SHIFT = 20  # LiteRT's int8 ADD headroom


def _tflite_add(y: Expr, out: Dequantized) -> Expr | None:
    y, lo, hi = _activation_bounds(y, out)
    operands = _per_tensor_operands(y, ew.add)
    if operands is None:
        return None
    a, b = operands
    twice_max = float(np.float32(2) * np.float32(max(a.s, b.s)))  # float arithmetic in LiteRT
    out_denominator = float(np.float32(1 << TFLITE_ADD_LEFT_SHIFT) * np.float32(out.s))
    scales = TFLiteAddScales(TFLITE_ADD_LEFT_SHIFT, quantize_multiplier(a.s / twice_max),
                             quantize_multiplier(b.s / twice_max), quantize_multiplier(twice_max / out_denominator))
    attrs = qap.QAddAttrs(a.zp, 0, b.zp, 0, _tflite_requant(out, lo, hi), scales)
    return Call(qap.qadd, (a.x, b.x), attrs)


def _tflite_mul(y: Expr, out: Dequantized) -> Expr | None:
    y, lo, hi = _activation_bounds(y, out)
    operands = _per_tensor_operands(y, ew.multiply)
    if operands is None:
        return None
    a, b = operands
    attrs = qnn_tflite.QMulAttrs(a.zp, b.zp, quantize_multiplier(a.s * b.s / out.s), _tflite_requant(out, lo, hi))
    return Call(qnn_tflite.qmul, (a.x, b.x), attrs)


def _tflite_mean(y: Expr, out: Dequantized) -> Expr | None:
    call = _call(y, red.mean)
    if call is None:
        return None
    x = _dequantized(call.args[0])
    if x is None or not x.per_tensor:
        return None
    attrs = call.attrs_as(red.ReduceAttrs)
    shape = _shape(x.x)
    count = int(np.prod([shape[a] for a in red.reduced_axes(len(shape), attrs.axes)], dtype=np.int64))
    q, e = quantize_multiplier(x.s / out.s)  # double(input scale) / double(output scale)
    multiplier = qnn_tflite.mean_multiplier(q, e, count)
    return Call(qnn_tflite.qmean, (x.x,), qnn_tflite.QMeanAttrs(attrs, x.zp, multiplier, _tflite_requant(out, *qnn.INT8)))


def _tflite_avg_pool(y: Expr, out: Dequantized) -> Expr | None:
    y, lo, hi = _activation_bounds(y, out)
    call = _call(y, pool.avg_pool2d)
    if call is None:
        return None
    x = _dequantized(call.args[0])
    attrs = call.attrs_as(PoolAttrs)
    if x is None or not x.per_tensor or x.s != out.s or x.zp != out.zp:
        return None  # LiteRT's int8 average pool keeps the quantisation; others stay float
    if any(attrs.padding) or attrs.ceil_mode or any(d != 1 for d in attrs.dilation):
        return None
    return Call(qap.qavg_pool2d, (x.x,), qap.QPoolAttrs(attrs, 0, 0, _tflite_requant(out, lo, hi)))


_RULES = (_conv, _dense, _add, _avg_pool, _injective)
_RULES_BY_ROUNDING = {
    Rounding.ONNX: _RULES,
    Rounding.TFLITE: (_tflite_conv, _tflite_dense, _tflite_add, _tflite_mul, _tflite_avg_pool, _tflite_mean,
                      _injective),
}


def _to_integer(q: Call) -> Expr | None:
    _, scale, zp = q.args
    attrs = q.attrs_as(qnn.QuantizeAttrs)
    if attrs.out_dtype != "int8" or not isinstance(scale, Constant) or not isinstance(zp, Constant):
        return None
    if scale.data.size != 1:
        return None
    out = Dequantized(q.args[0], scale.data.astype(np.float64).reshape(-1), zp.data.astype(np.int64).reshape(-1),
                      attrs.axis)
    for rule in _RULES_BY_ROUNDING[attrs.rounding]:
        result = rule(q.args[0], out)
        if result is not None:
            return result
    return None


def quantize_to_integer(func: Function, mod: IRModule | None = None) -> Function:
    func = infer_function(func, mod)

    def visit(old: Expr, new: Expr) -> Expr | None:
        if isinstance(new, Call) and new.op is qnn.quantize:
            typed = infer_expr(new, mod, incremental=True)
            result = _to_integer(typed) if isinstance(typed, Call) else None
            return None if result is None else infer_expr(result, mod, incremental=True)
        return None

    func = infer_function(rewrite(func, visit), mod)

    def fold_weights(old: Expr, new: Expr) -> Expr | None:
        if not (isinstance(new, Call) and new.op is qnn.dequantize):
            return None
        constants = [a.data for a in new.args if isinstance(a, Constant)]
        if len(constants) != len(new.args):
            return None
        return Constant(np.asarray(qnn.dequantize.reference(constants, new.attrs)))

    return infer_function(fold_expr(rewrite(func, fold_weights)), mod)


class QuantizeToInteger(FunctionPass):
    name = "QuantizeToInteger"
    opt_level = 0

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return quantize_to_integer(func, mod)
