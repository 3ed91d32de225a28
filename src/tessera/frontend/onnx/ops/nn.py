"""Converters for convolution, pooling, matrix products, dropout and softmax.

Normalisations live in `normalization.py`, reductions in `reduction.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ....op import elemwise as ew
from ....op import reduce as red
from ....op import transform as tf
from ....op.nn import conv as conv_ops
from ....op.nn import conv_transpose as convt_ops
from ....op.nn import matmul as mm
from ....op.nn import pool, softmax
from ....relay.expr import Constant, Expr
from ..importer import ImportContext, Node
from ..registry import converter
from .common import auto_pad, ints, scalar

_SPATIAL_RANKS = "1-d, 2-d and 3-d"


def _spatial_rank(node: Node, ctx: ImportContext, x: Expr, what: str) -> int:
    d = len(ctx.shape_of(x)) - 2
    if d not in (1, 2, 3):
        raise node.error(f"{d}-d {what} is not supported ({_SPATIAL_RANKS} are)")
    return d


def _add_channel_bias(node: Node, ctx: ImportContext, out: Expr, d: int) -> Expr:
    """out + B, B of shape (C,) broadcast over the spatial dims."""
    b = node.optional_input(2)
    if b is None:
        return out
    return ew.add(out, tf.reshape(b, newshape=(ctx.shape_of(b)[0],) + (1,) * d))


# ------------------------------------------------------------- convolution
@converter("Conv", since=1)
def conv(node: Node, ctx: ImportContext) -> Expr:
    x, w = node.input(0), node.input(1)
    d = _spatial_rank(node, ctx, x, "convolution")
    kernel = ints(node.attr("kernel_shape", ctx.shape_of(w)[2:]))
    strides = ints(node.attr("strides", [1] * d))
    dilations = ints(node.attr("dilations", [1] * d))
    pads = auto_pad(node, ctx.shape_of(x)[2:], kernel, strides, dilations)
    out = conv_ops.CONV_BY_RANK[d](x, w, strides=strides, padding=pads, dilation=dilations,
                                    groups=int(node.attr("group", 1)))
    return _add_channel_bias(node, ctx, out, d)


def _conv_transpose_pads(node: Node, in_sp: tuple[int, ...], kernel: tuple[int, ...],
                         strides: tuple[int, ...], dilations: tuple[int, ...]) -> tuple[int, ...]:
    """Begin pads and (possibly negative) end pads, folding in output_padding
    and output_shape, as the ONNX reference implementation computes them."""
    d = len(kernel)
    out_pad = ints(node.attr("output_padding", [0] * d))
    mode = node.attr("auto_pad", "NOTSET") or "NOTSET"
    if mode not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise node.error(f"auto_pad={mode!r} is not valid; expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    if len(out_pad) != d:
        raise node.error(f"output_padding must have {d} values, got {list(out_pad)}")
    full = [(in_sp[k] - 1) * strides[k] + dilations[k] * (kernel[k] - 1) + 1 for k in range(d)]
    shape_attr = node.attr("output_shape", None)
    target = ints(shape_attr)[-d:] if shape_attr is not None else None
    if "pads" in node.attrs and mode in ("NOTSET", ""):
        begins = list(ints(node.attrs["pads"]))[:d]
        ends = list(ints(node.attrs["pads"]))[d:]
        if len(begins) != d or len(ends) != d:
            raise node.error(f"pads must have {2 * d} values, got {list(node.attrs['pads'])}")
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        target = target or tuple(in_sp[k] * strides[k] for k in range(d))
        total = [full[k] + out_pad[k] - target[k] for k in range(d)]
        small = [t // 2 for t in total]
        begins = small if mode == "SAME_UPPER" else [t - s for t, s in zip(total, small)]
        ends = [t - b for t, b in zip(total, begins)]
    else:
        begins, ends = [0] * d, [0] * d
    if target is None:
        target = tuple(full[k] + out_pad[k] - begins[k] - ends[k] for k in range(d))
    # the end pad that yields exactly `target` outputs after `begins`
    return tuple(begins) + tuple(full[k] - begins[k] - target[k] for k in range(d))


@converter("ConvTranspose", since=1)
def conv_transpose(node: Node, ctx: ImportContext) -> Expr:
    x, w = node.input(0), node.input(1)
    d = _spatial_rank(node, ctx, x, "transposed convolution")
    w_shape = ctx.shape_of(w)
    kernel = ints(node.attr("kernel_shape", w_shape[2:]))
    if kernel != tuple(w_shape[2:]):
        raise node.error(f"kernel_shape {list(kernel)} differs from the weight's spatial shape {list(w_shape[2:])}")
    strides = ints(node.attr("strides", [1] * d))
    dilations = ints(node.attr("dilations", [1] * d))
    pads = _conv_transpose_pads(node, ctx.shape_of(x)[2:], kernel, strides, dilations)
    out = convt_ops.CONV_TRANSPOSE_BY_RANK[d](x, w, strides=strides, padding=pads, dilation=dilations,
                                              groups=int(node.attr("group", 1)))
    return _add_channel_bias(node, ctx, out, d)


# ----------------------------------------------------------------- pooling
_POOL_TABLES = {"max": pool.MAX_POOL_BY_RANK, "avg": pool.AVG_POOL_BY_RANK, "lp": pool.LP_POOL_BY_RANK}


def _pool_attrs(node: Node, ctx: ImportContext, x: Expr, kind: str) -> tuple[int, dict[str, object]]:
    """The spatial rank (which picks the op) and the op's attributes."""
    d = _spatial_rank(node, ctx, x, "pooling")
    kernel = ints(node.attr("kernel_shape"))
    if len(kernel) != d:
        raise node.error(f"kernel_shape {list(kernel)} needs {d} values for a {d + 2}-d input")
    strides = ints(node.attr("strides", [1] * d))
    dilations = ints(node.attr("dilations", [1] * d))
    return d, {
        "kernel": kernel, "strides": strides, "dilation": dilations,
        "padding": auto_pad(node, ctx.shape_of(x)[2:], kernel, strides, dilations),
        "ceil_mode": bool(node.attr("ceil_mode", 0)),
        "count_include_pad": bool(node.attr("count_include_pad", 0)) if kind == "avg" else False,
        "p": float(node.attr("p", 2)) if kind == "lp" else 2.0,
    }


def _pool(node: Node, ctx: ImportContext, kind: str) -> Expr:
    x = node.input(0)
    rank, attrs = _pool_attrs(node, ctx, x, kind)
    return _POOL_TABLES[kind][rank](x, **attrs)


@converter("MaxPool", since=1)
def max_pool(node: Node, ctx: ImportContext) -> list[Expr]:
    """Values, and the flat input index of each maximum when Indices is asked for."""
    x = node.input(0)
    rank, attrs = _pool_attrs(node, ctx, x, "max")
    outputs = [pool.MAX_POOL_BY_RANK[rank](x, **attrs)]
    if node.num_outputs > 1 and node.outputs[1]:
        order = int(node.attr("storage_order", 0))
        if order not in (0, 1):
            raise node.error(f"storage_order={order} is not valid (0 = row major, 1 = column major)")
        outputs.append(pool.max_pool_indices(x, storage_order=order, **attrs))
    return outputs


@converter("AveragePool", since=1)
def average_pool(node: Node, ctx: ImportContext) -> Expr:
    return _pool(node, ctx, "avg")


@converter("LpPool", since=1)
def lp_pool(node: Node, ctx: ImportContext) -> Expr:
    return _pool(node, ctx, "lp")


def _spatial_axes(ctx: ImportContext, x: Expr) -> tuple[int, ...]:
    return tuple(range(2, len(ctx.shape_of(x))))


@converter("GlobalAveragePool", since=1)
def global_average_pool(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    return red.mean(x, axes=_spatial_axes(ctx, x), keepdims=True)


@converter("GlobalMaxPool", since=1)
def global_max_pool(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    return red.max(x, axes=_spatial_axes(ctx, x), keepdims=True)


@converter("GlobalLpPool", since=1)
def global_lp_pool(node: Node, ctx: ImportContext) -> Expr:
    """An Lp pool whose window is the whole spatial extent."""
    x = node.input(0)
    d = _spatial_rank(node, ctx, x, "pooling")
    kernel = tuple(ctx.shape_of(x)[2:])
    return pool.LP_POOL_BY_RANK[d](x, kernel=kernel, strides=(1,) * d, padding=(0,) * (2 * d),
                                   dilation=(1,) * d, p=float(node.attr("p", 2)))


# -------------------------------------------------------- matrix products
@converter("Gemm", since=1)
def gemm(node: Node, ctx: ImportContext) -> Expr:
    a, b = node.input(0), node.input(1)
    dtype = ctx.dtype_of(a)
    if int(node.attr("transA", 0)):
        a = tf.transpose(a, axes=(1, 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    out = mm.dense(a, b) if int(node.attr("transB", 0)) else mm.matmul(a, b)
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


# ----------------------------------------------------------------- dropout
def _dropout_training(node: Node, ctx: ImportContext) -> bool:
    """Whether this Dropout drops anything (training mode with a ratio > 0).

    Before opset 12 there is no training mode to ask for (opset < 7's
    `is_test` flag was dropped as meaningless for inference graphs)."""
    if node.opset < 12:
        return False
    t = node.optional_input(2)
    if t is None or not bool(np.asarray(ctx.constant(t, "the training_mode input")).reshape(())):
        return False
    r = node.optional_input(1)
    ratio = 0.5 if r is None else float(np.asarray(ctx.constant(r, "the ratio input")).reshape(()))
    return ratio != 0.0


@converter("Dropout", since=1)
def dropout(node: Node, ctx: ImportContext) -> list[Expr]:
    """Inference: the identity, with an all-true mask."""
    if _dropout_training(node, ctx):
        raise node.error("training mode (random dropout with a non-zero ratio) is not supported; "
                         "tessera compiles inference graphs (training_mode must be false or ratio 0)")
    x = node.input(0)
    outputs: list[Expr] = [x]
    if node.num_outputs > 1:
        mask_dtype = "bool" if node.opset >= 10 else ctx.dtype_of(x)
        outputs.append(Constant(np.ones(ctx.shape_of(x), dtype=mask_dtype)))
    return outputs


# ----------------------------------------------------------------- softmax
def _softmax_like(node: Node, ctx: ImportContext, op: Callable[..., Expr]) -> Expr:
    x = node.input(0)
    shape = ctx.shape_of(x)
    if node.opset >= 13:
        return op(x, axis=int(node.attr("axis", -1)))
    # before opset 13 the input is coerced to 2-d at `axis`
    axis = int(node.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise node.error(f"axis {axis} is out of range for a {len(shape)}-d input")
    axis = axis + len(shape) if axis < 0 else axis
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    flat = tf.reshape(x, newshape=(outer, int(np.prod(shape[axis:], dtype=np.int64))))
    return tf.reshape(op(flat, axis=1), newshape=shape)


@converter("Softmax", since=1)
def softmax_(node: Node, ctx: ImportContext) -> Expr:
    return _softmax_like(node, ctx, softmax.softmax)


@converter("LogSoftmax", since=1)
def log_softmax(node: Node, ctx: ImportContext) -> Expr:
    return _softmax_like(node, ctx, softmax.log_softmax)


@converter("Hardmax", since=1)
def hardmax(node: Node, ctx: ImportContext) -> Expr:
    return _softmax_like(node, ctx, softmax.hardmax)
