"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED.

Weights are reordered once at import time to tessera's layouts (OHWI and
1HW(C*M) -> OIHW, with per-channel scales staying on axis 0), so the int8
patterns are the ones `transform.quantize_to_integer` fuses for ONNX models.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....op import elemwise as ew
from ....op import transform as tf
from ....op.nn import conv as conv_ops
from ....op.nn import matmul as mm
from ....relay.expr import Constant, Expr
from ..importer import Operator, Value, dequantize, shape_of
from ..reader import Quantization
from ..registry import converter
from .common import fused_activation, padding


def _weight(op: Operator, k: int, layout: tuple[int, ...], shape: tuple[int, ...] | None = None) -> Expr:
    """Constant input k transposed by `layout` (and reshaped), dequantised along the new axis 0."""
    t = op.tensor(k)
    w = np.ascontiguousarray(op.constant(k, "the weight").transpose(layout))
    if shape is not None:
        w = w.reshape(shape)
    q = op.quantization(t)
    if q is None:
        return Constant(w)
    if t.dtype != "int8":
        raise op.error(f"{t.describe()} is {t.dtype}; tessera takes int8 quantised weights")
    if not q.per_tensor and layout[0] != q.axis:
        raise op.error(f"{t.describe()} is quantised along axis {q.axis}, expected the output channels")
    return dequantize(Constant(w), q, "int8", 0)


def _bias(op: Operator, k: int, channels: int) -> Expr | None:
    if not op.has_input(k):
        return None
    t = op.tensor(k)
    b = op.constant(k, "the bias").reshape(-1)
    if b.size != channels:
        raise op.error(f"{t.describe()} has {b.size} values for {channels} output channels")
    q = op.quantization(t)
    if q is None:
        return Constant(b)
    if t.dtype != "int32":
        raise op.error(f"{t.describe()} is {t.dtype}; tessera takes int32 quantised biases")
    scale = np.broadcast_to(q.scale, (channels,)).astype(np.float32)
    return dequantize(Constant(b), Quantization(scale, np.zeros(channels, np.int64), 0), "int32", 0)


def _conv(op: Operator, w: Expr, groups: int, options: Any) -> Value:
    x = op.dequantized(0, channels_first=True).expr
    _, _, h, wd = shape_of(x)
    _, _, kh, kw = shape_of(w)
    strides = (int(options.StrideH()), int(options.StrideW()))
    dilation = (int(options.DilationHFactor()), int(options.DilationWFactor()))
    pads = padding(op, int(options.Padding()), (h, wd), (kh, kw), strides, dilation)
    y = conv_ops.conv2d(x, w, strides=strides, padding=pads, dilation=dilation, groups=groups)
    channels = shape_of(w)[0]
    bias = _bias(op, 2, channels)
    if bias is not None:
        y = ew.add(y, tf.reshape(bias, newshape=(channels, 1, 1)))
    y = fused_activation(op, y, int(options.FusedActivationFunction()))
    return op.quantized(Value(y, channels_first=True))


@converter("CONV_2D")
def conv_2d(op: Operator) -> Value:
    return _conv(op, _weight(op, 1, (0, 3, 1, 2)), 1, op.options)


@converter("DEPTHWISE_CONV_2D")
def depthwise_conv_2d(op: Operator) -> Value:
    _, kh, kw, out_channels = op.tensor(1).shape
    channels = op.tensor(0).shape[3]
    multiplier = int(op.options.DepthMultiplier())
    if out_channels != channels * max(multiplier, 1) and multiplier:
        raise op.error(f"{out_channels} output channels for {channels} inputs and depth multiplier {multiplier}")
    w = _weight(op, 1, (3, 0, 1, 2), (out_channels, 1, kh, kw))
    return _conv(op, w, channels, op.options)


@converter("FULLY_CONNECTED")
def fully_connected(op: Operator) -> Value:
    o = op.options
    if int(o.WeightsFormat()) != 0:
        raise op.error("shuffled weight formats are not supported (DEFAULT is)")
    units, depth = op.tensor(1).shape
    x = op.dequantized(0, channels_first=False).expr
    rows = int(np.prod(shape_of(x))) // depth
    if shape_of(x) != (rows, depth):
        x = tf.reshape(x, newshape=(rows, depth))
    y = mm.dense(x, _weight(op, 1, (0, 1)))
    bias = _bias(op, 2, units)
    if bias is not None:
        y = ew.add(y, bias)
    y = fused_activation(op, y, int(o.FusedActivationFunction()))
    y = op.quantized(Value(y)).expr
    out_shape = op.output().shape
    return Value(y if out_shape == (rows, units) else tf.reshape(y, newshape=out_shape))
