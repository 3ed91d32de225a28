"""Data movement: RESHAPE, TRANSPOSE, PAD, PADV2, CONCATENATION, STRIDED_SLICE, SHAPE and PACK.

When input and output share their quantisation (what the converter writes)
the int8 values move as they are; otherwise the op runs on dequantised
values and the result is quantised again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ....op import transform as tf
from ....op.transform_pad import pad
from ....relay.expr import Constant, Expr
from ..importer import NHWC_AXIS_IN_NCHW, TO_NCHW, Operator, Value, nchw, nhwc
from ..registry import converter
from .common import fused_activation


def _moves_values(op: Operator, ks: Sequence[int]) -> bool:
    """True when the op can move the stored values: no quantisation anywhere, or the same everywhere."""
    if all(op.quantization(op.tensor(k)) is None for k in ks) and op.quantization(op.output()) is None:
        return True
    return all(op.same_quantization(k) for k in ks)


def _movement(op: Operator, ks: Sequence[int], channels_first: bool,
              fn: Callable[[list[Expr]], Expr]) -> Value:
    """`fn` on inputs `ks` in one layout, on stored values when it can, else dequantised and requantised."""
    if _moves_values(op, ks):
        exprs = [nchw(op.value(k)) if channels_first else nhwc(op.value(k)) for k in ks]
        return Value(fn(exprs), channels_first)
    exprs = [op.dequantized(k, channels_first).expr for k in ks]
    return op.quantized(Value(fn(exprs), channels_first))


@converter("RESHAPE")
def reshape(op: Operator) -> Value:
    shape = op.output().shape
    return _movement(op, (0,), False, lambda xs: tf.reshape(xs[0], newshape=shape))


@converter("TRANSPOSE")
def transpose(op: Operator) -> Value:
    perm = tuple(int(p) for p in op.constant(1, "the permutation").reshape(-1))
    return _movement(op, (0,), False, lambda xs: tf.transpose(xs[0], axes=perm))


def _pad(op: Operator, value: np.ndarray | None) -> Value:
    widths = op.constant(1, "the paddings").reshape(-1, 2).astype(np.int64)
    x = op.value(0)
    first = x.channels_first and len(widths) == 4
    if first:
        widths = widths[list(TO_NCHW)]
    pad_width = tuple((int(a), int(b)) for a, b in widths)

    def fill(dtype_zero: np.generic) -> Expr:
        return Constant(np.asarray(value if value is not None else dtype_zero).reshape(()))

    if _moves_values(op, (0,)):
        q = op.quantization(op.tensor(0))
        dtype = np.dtype(op.tensor(0).dtype)
        zero = dtype.type(q.zero_point[0]) if q is not None else dtype.type(0)  # LiteRT pads with the zero point
        return Value(pad(x.expr, fill(zero), pad_width=pad_width), first)
    y = pad(op.dequantized(0, first).expr, fill(np.float32(0)), pad_width=pad_width)
    return op.quantized(Value(y, first))


@converter("PAD")
def pad_(op: Operator) -> Value:
    return _pad(op, None)


@converter("PADV2")
def padv2(op: Operator) -> Value:
    value = op.constant(2, "the pad value").reshape(())
    if not _moves_values(op, (0,)):
        raise op.error("PADV2 with different input and output quantisation is not supported")
    return _pad(op, value.astype(op.tensor(0).dtype))


@converter("CONCATENATION")
def concatenation(op: Operator) -> Value:
    ks = tuple(range(op.num_inputs))
    ndim = len(op.output().shape)
    axis = int(op.options.Axis()) % ndim
    first = ndim == 4 and all(op.value(k).channels_first for k in ks)
    activation = int(op.options.FusedActivationFunction())
    if first:
        axis = NHWC_AXIS_IN_NCHW[axis]
    if activation:
        ys = [op.dequantized(k, first).expr for k in ks]
        y = fused_activation(op, tf.concatenate(*ys, axis=axis), activation)
        return op.quantized(Value(y, first))
    return _movement(op, ks, first, lambda xs: tf.concatenate(*xs, axis=axis))


_INT_MAX = 2**62


@converter("STRIDED_SLICE")
def strided_slice(op: Operator) -> Value:
    o = op.options
    if int(o.EllipsisMask()) or int(o.NewAxisMask()):
        raise op.error("ellipsis_mask and new_axis_mask are not supported")
    shape = op.tensor(0).shape
    begin = [int(v) for v in op.constant(1, "begin").reshape(-1)]
    end = [int(v) for v in op.constant(2, "end").reshape(-1)]
    strides = [int(v) for v in op.constant(3, "strides").reshape(-1)] if op.has_input(3) else [1] * len(begin)
    if not len(begin) == len(end) == len(strides) <= len(shape):
        raise op.error(f"begin {begin}, end {end} and strides {strides} do not fit the input shape {shape}")
    shrink = int(o.ShrinkAxisMask())
    for k in range(len(begin)):
        if int(o.BeginMask()) >> k & 1:
            begin[k] = -_INT_MAX if strides[k] > 0 else _INT_MAX
        if int(o.EndMask()) >> k & 1:
            end[k] = _INT_MAX if strides[k] > 0 else -_INT_MAX
        if shrink >> k & 1:  # one element, the axis removed
            first = begin[k] + shape[k] if begin[k] < 0 else begin[k]
            begin[k], end[k], strides[k] = first, first + 1, 1
    for k in range(len(begin), len(shape)):
        begin.append(0)
        end.append(shape[k])
        strides.append(1)
    out_shape = op.output().shape

    def sliced(xs: list[Expr]) -> Expr:
        y = tf.strided_slice(xs[0], begin=tuple(begin), end=tuple(end), strides=tuple(strides))
        return tf.reshape(y, newshape=out_shape) if shrink else y

    return _movement(op, (0,), False, sliced)


@converter("SHAPE")
def shape(op: Operator) -> Value:
    return Value(Constant(np.asarray(op.tensor(0).shape, dtype=op.output().dtype)))


@converter("PACK")
def pack(op: Operator) -> Value:
    out_shape = op.output().shape
    axis = int(op.options.Axis()) % len(out_shape)
    one = out_shape[:axis] + (1,) + out_shape[axis + 1:]
    return _movement(op, tuple(range(op.num_inputs)), False,
                     lambda xs: tf.concatenate(*[tf.reshape(x, newshape=one) for x in xs], axis=axis))
