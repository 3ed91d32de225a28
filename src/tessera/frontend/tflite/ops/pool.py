"""AVERAGE_POOL_2D, MAX_POOL_2D and MEAN."""

from __future__ import annotations

from ....op import reduce as red
from ....op.nn import pool
from ..importer import NHWC_AXIS_IN_NCHW, Operator, Value, nchw, shape_of
from ..registry import converter
from .common import fused_activation, padding


def _pool_attrs(op: Operator, spatial: tuple[int, ...]) -> dict[str, object]:
    o = op.options
    kernel = (int(o.FilterHeight()), int(o.FilterWidth()))
    strides = (int(o.StrideH()), int(o.StrideW()))
    return {"kernel": kernel, "strides": strides, "dilation": (1, 1),
            "padding": padding(op, int(o.Padding()), (spatial[0], spatial[1]), kernel, strides)}


@converter("AVERAGE_POOL_2D")
def average_pool_2d(op: Operator) -> Value:
    x = op.dequantized(0, channels_first=True).expr
    y = pool.avg_pool2d(x, count_include_pad=False, **_pool_attrs(op, shape_of(x)[2:]))
    y = fused_activation(op, y, int(op.options.FusedActivationFunction()))
    return op.quantized(Value(y, channels_first=True))


@converter("MAX_POOL_2D")
def max_pool_2d(op: Operator) -> Value:
    activation = int(op.options.FusedActivationFunction())
    if op.same_quantization(0) and activation == 0:
        xs = nchw(op.value(0))  # the maximum of int8 values with one scale: no arithmetic at all
        return Value(pool.max_pool2d(xs, **_pool_attrs(op, shape_of(xs)[2:])), channels_first=True)
    x = op.dequantized(0, channels_first=True).expr
    y = fused_activation(op, pool.max_pool2d(x, **_pool_attrs(op, shape_of(x)[2:])), activation)
    return op.quantized(Value(y, channels_first=True))


@converter("MEAN")
def mean(op: Operator) -> Value:
    x = op.dequantized(0)
    ndim = len(op.tensor(0).shape)
    axes = sorted({int(a) % ndim for a in op.constant(1, "the axes").reshape(-1)})
    keepdims = bool(op.options.KeepDims())
    channels_first = x.channels_first and keepdims
    if x.channels_first and not keepdims:
        x = op.dequantized(0, channels_first=False)
    if channels_first:
        axes = sorted(NHWC_AXIS_IN_NCHW[a] for a in axes)
    y = red.mean(x.expr, axes=tuple(axes), keepdims=keepdims)
    return op.quantized(Value(y, channels_first))
