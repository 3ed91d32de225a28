"""Converters for neural-network operators: conv, pooling, gemm, norms, softmax."""

from __future__ import annotations

import numpy as np

from ....op import elemwise as ew
from ....op import reduce as red
from ....op import transform as tf
from ....op.nn import conv as conv_ops
from ....op.nn import matmul as mm
from ....op.nn import norm, pool, softmax
from ....relay.expr import Expr
from ..importer import ImportContext, Node
from ..registry import converter
from .common import auto_pad, ints, scalar


@converter("Conv", since=1)
def conv(node: Node, ctx: ImportContext) -> Expr:
    x, w = node.input(0), node.input(1)
    x_shape, w_shape = ctx.shape_of(x), ctx.shape_of(w)
    d = len(x_shape) - 2
    if d not in conv_ops.CONV_BY_RANK:
        raise node.error(f"{d}-d convolution is not supported (1-d, 2-d and 3-d are)")
    kernel = ints(node.attr("kernel_shape", w_shape[2:]))
    strides = ints(node.attr("strides", [1] * d))
    dilations = ints(node.attr("dilations", [1] * d))
    pads = auto_pad(node, x_shape[2:], kernel, strides, dilations)
    out = conv_ops.CONV_BY_RANK[d](x, w, strides=strides, padding=pads, dilation=dilations,
                                    groups=int(node.attr("group", 1)))
    b = node.optional_input(2)
    if b is not None:
        out = ew.add(out, tf.reshape(b, newshape=(ctx.shape_of(b)[0],) + (1,) * d))
    return out


def _pool(node: Node, ctx: ImportContext, kind: str) -> Expr:
    x = node.input(0)
    x_shape = ctx.shape_of(x)
    d = len(x_shape) - 2
    table = pool.MAX_POOL_BY_RANK if kind == "max" else pool.AVG_POOL_BY_RANK
    if d not in table:
        raise node.error(f"{d}-d pooling is not supported (1-d, 2-d and 3-d are)")
    if node.num_outputs > 1 and node.outputs[1]:
        raise node.error("the Indices output of MaxPool is not supported")
    if kind == "max" and int(node.attr("storage_order", 0)) != 0:
        raise node.error("storage_order=1 is not supported")
    kernel = ints(node.attr("kernel_shape"))
    strides = ints(node.attr("strides", [1] * d))
    dilations = ints(node.attr("dilations", [1] * d))
    pads = auto_pad(node, x_shape[2:], kernel, strides, dilations)
    return table[d](
        x, kernel=kernel, strides=strides, padding=pads, dilation=dilations,
        ceil_mode=bool(node.attr("ceil_mode", 0)),
        count_include_pad=bool(node.attr("count_include_pad", 0)) if kind == "avg" else False,
    )


@converter("MaxPool", since=1)
def max_pool(node: Node, ctx: ImportContext) -> Expr:
    return _pool(node, ctx, "max")


@converter("AveragePool", since=1)
def average_pool(node: Node, ctx: ImportContext) -> Expr:
    return _pool(node, ctx, "avg")


@converter("GlobalAveragePool", since=1)
def global_average_pool(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    nd = len(ctx.shape_of(x))
    return red.mean(x, axes=tuple(range(2, nd)), keepdims=True)


@converter("GlobalMaxPool", since=1)
def global_max_pool(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    nd = len(ctx.shape_of(x))
    return red.max(x, axes=tuple(range(2, nd)), keepdims=True)


@converter("Gemm", since=1)
def gemm(node: Node, ctx: ImportContext) -> Expr:
    a, b = node.input(0), node.input(1)
    dtype = ctx.dtype_of(a)
    if int(node.attr("transA", 0)):
        a = tf.transpose(a, axes=(1, 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if int(node.attr("transB", 0)):
        out = mm.dense(a, b)
    else:
        out = mm.matmul(a, b)
    if alpha != 1.0:
        out = ew.multiply(out, scalar(alpha, dtype))
    c = node.optional_input(2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = ew.multiply(c, scalar(beta, dtype))
        out = ew.add(out, c)
    return out


@converter("MatMul", since=1)
def matmul(node: Node, ctx: ImportContext) -> Expr:
    return mm.matmul(node.input(0), node.input(1))


@converter("BatchNormalization", since=1)
def batch_norm(node: Node, ctx: ImportContext) -> Expr:
    if int(node.attr("training_mode", 0)):
        raise node.error("training_mode=1 is not supported (inference only)")
    if node.opset < 7 and int(node.attr("is_test", 1)) == 0:
        raise node.error("is_test=0 (training) is not supported")
    x, scale, bias, mean, var = (node.input(k) for k in range(5))
    return norm.batch_norm(x, scale, bias, mean, var, axis=1, epsilon=float(node.attr("epsilon", 1e-5)))


@converter("Dropout", since=1)
def dropout(node: Node, ctx: ImportContext) -> list[Expr]:
    x = node.input(0)
    outputs: list[Expr] = [x]
    if node.num_outputs > 1:
        mask = np.ones(ctx.shape_of(x), dtype=bool)
        outputs.append(scalar(0, "bool") if mask.ndim == 0 else _const(mask))
    return outputs


def _const(value: np.ndarray) -> Expr:
    from ....relay.expr import Constant

    return Constant(value)


def _softmax_like(node: Node, ctx: ImportContext, op) -> Expr:
    x = node.input(0)
    shape = ctx.shape_of(x)
    if node.opset >= 13:
        return op(x, axis=int(node.attr("axis", -1)))
    # before opset 13 the input is flattened to 2-d at `axis`
    axis = int(node.attr("axis", 1)) % max(len(shape), 1)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    flat = tf.reshape(x, newshape=(outer, int(np.prod(shape[axis:], dtype=np.int64))))
    return tf.reshape(op(flat, axis=1), newshape=shape)


@converter("Softmax", since=1)
def softmax_(node: Node, ctx: ImportContext) -> Expr:
    return _softmax_like(node, ctx, softmax.softmax)


@converter("LogSoftmax", since=1)
def log_softmax(node: Node, ctx: ImportContext) -> Expr:
    return _softmax_like(node, ctx, softmax.log_softmax)


@converter("LRN", since=1)
def lrn(node: Node, ctx: ImportContext) -> Expr:
    return norm.lrn(node.input(0), size=int(node.attr("size")), alpha=float(node.attr("alpha", 1e-4)),
                    beta=float(node.attr("beta", 0.75)), bias=float(node.attr("bias", 1.0)))
