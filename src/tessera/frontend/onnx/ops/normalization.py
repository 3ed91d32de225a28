"""Converters for normalisations: batch, instance, layer, group, LRN, MVN, Lp.

All but batch normalisation (a Relay op that inference folds into the
preceding convolution) and LRN decompose into reductions and elementwise
ops, exactly as the ONNX function bodies define them; fusion turns each
reduction plus its elementwise neighbours into one kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ....op import elemwise as ew
from ....op import reduce as red
from ....op import transform as tf
from ....op.nn import norm
from ....relay.expr import Expr
from ..importer import ImportContext, Node
from ..registry import converter
from .common import ints, scalar


class Standardized(NamedTuple):
    y: Expr  # (x - mean) * inv_std
    mean: Expr  # keepdims
    inv_std: Expr  # keepdims: 1 / sqrt(var + eps)


def standardize(x: Expr, axes: tuple[int, ...], epsilon: float, dtype: str) -> Standardized:
    """x normalised to zero mean and unit variance over `axes`."""
    mean = red.mean(x, axes=axes, keepdims=True)
    centered = ew.subtract(x, mean)
    var = red.mean(ew.multiply(centered, centered), axes=axes, keepdims=True)
    inv_std = ew.divide(scalar(1, dtype), ew.sqrt(ew.add(var, scalar(epsilon, dtype))))
    return Standardized(ew.multiply(centered, inv_std), mean, inv_std)


def _per_channel(v: Expr, ctx: ImportContext, ndim: int) -> Expr:
    """A (C,) vector shaped to broadcast along axis 1 of an `ndim`-d tensor."""
    return tf.reshape(v, newshape=(ctx.shape_of(v)[0],) + (1,) * (ndim - 2))


def _normalize_axis(node: Node, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise node.error(f"axis {axis} is out of range for a {ndim}-d input (valid: {-ndim}..{ndim - 1})")
    return axis % ndim


# ------------------------------------------------------------------ batch
def _batch_norm_training(node: Node, ctx: ImportContext, x: Expr, scale: Expr, bias: Expr,
                         mean: Expr, var: Expr, epsilon: float) -> list[Expr]:
    """Normalise with the batch's statistics; also return the updated running ones."""
    shape, dtype = ctx.shape_of(x), ctx.dtype_of(x)
    axes = (0,) + tuple(range(2, len(shape)))
    batch_mean = red.mean(x, axes=axes, keepdims=False)
    centered = ew.subtract(x, tf.reshape(batch_mean, newshape=(shape[1],) + (1,) * (len(shape) - 2)))
    batch_var = red.mean(ew.multiply(centered, centered), axes=axes, keepdims=False)
    y = norm.batch_norm(x, scale, bias, batch_mean, batch_var, axis=1, epsilon=epsilon)
    momentum = float(node.attr("momentum", 0.9))

    def running(old: Expr, new: Expr) -> Expr:
        return ew.add(ew.multiply(old, scalar(momentum, dtype)), ew.multiply(new, scalar(1 - momentum, dtype)))

    return [y, running(mean, batch_mean), running(var, batch_var)]


def _is_training(node: Node) -> bool:
    """Training mode: `is_test=0` before opset 7, the statistics outputs
    requested in opsets 7-13, `training_mode=1` from opset 14 on."""
    if node.opset < 7:
        return int(node.attr("is_test", 0)) == 0
    if node.opset < 14:
        return any(node.outputs[1:])
    return bool(int(node.attr("training_mode", 0)))


@converter("BatchNormalization", since=1)
def batch_norm(node: Node, ctx: ImportContext) -> Expr | list[Expr]:
    if node.opset < 9 and int(node.attr("spatial", 1)) == 0:
        raise node.error("spatial=0 (per-element statistics) is not supported; only spatial=1 is")
    x, scale, bias, mean, var = (node.input(k) for k in range(5))
    epsilon = float(node.attr("epsilon", 1e-5))
    if not _is_training(node):
        return norm.batch_norm(x, scale, bias, mean, var, axis=1, epsilon=epsilon)
    if node.opset < 14 and any(node.outputs[1:]):
        raise node.error("the training-mode statistics outputs of opset < 14 (mean, var, saved_mean, "
                         "saved_var) are not supported; only Y is")
    return _batch_norm_training(node, ctx, x, scale, bias, mean, var, epsilon)[:max(1, node.num_outputs)]


# --------------------------------------------------------------- instance
@converter("InstanceNormalization", since=1)
def instance_norm(node: Node, ctx: ImportContext) -> Expr:
    x, scale, bias = node.input(0), node.input(1), node.input(2)
    ndim, dtype = len(ctx.shape_of(x)), ctx.dtype_of(x)
    if ndim < 3:
        raise node.error(f"needs an input of rank >= 3 (N, C, spatial...), got rank {ndim}")
    std = standardize(x, tuple(range(2, ndim)), float(node.attr("epsilon", 1e-5)), dtype)
    return ew.add(ew.multiply(std.y, _per_channel(scale, ctx, ndim)), _per_channel(bias, ctx, ndim))


# ------------------------------------------------------------------ layer
@converter("LayerNormalization", since=17)
def layer_norm(node: Node, ctx: ImportContext) -> list[Expr]:
    x, scale, bias = node.input(0), node.input(1), node.optional_input(2)
    shape, dtype = ctx.shape_of(x), ctx.dtype_of(x)
    axis = _normalize_axis(node, int(node.attr("axis", -1)), len(shape))
    stash = int(node.attr("stash_type", 1))
    if stash not in (1, 11):
        raise node.error(f"stash_type={stash} is not supported (1 = float32 or 11 = float64 are)")
    compute_dtype = "float32" if stash == 1 else "float64"
    if compute_dtype != dtype:
        x = ew.cast(x, dtype=compute_dtype)
    std = standardize(x, tuple(range(axis, len(shape))), float(node.attr("epsilon", 1e-5)), compute_dtype)
    y = std.y if compute_dtype == dtype else ew.cast(std.y, dtype=dtype)
    y = ew.multiply(y, scale)
    if bias is not None:
        y = ew.add(y, bias)
    return [y, std.mean, std.inv_std]


# ------------------------------------------------------------------ group
@converter("GroupNormalization", since=18)
def group_norm(node: Node, ctx: ImportContext) -> Expr:
    """Standardise (N, G, C/G * spatial); scale and bias are per group before
    opset 21 and per channel from opset 21 on."""
    x, scale, bias = node.input(0), node.input(1), node.input(2)
    shape, dtype = ctx.shape_of(x), ctx.dtype_of(x)
    groups = int(node.attr("num_groups"))
    if len(shape) < 2 or groups < 1 or shape[1] % groups:
        raise node.error(f"num_groups={groups} must divide the channel count of input {shape}")
    if node.opset >= 21 and int(node.attr("stash_type", 1)) != 1:
        raise node.error("stash_type other than 1 (float32) is not supported")
    per_group = int(np.prod(shape[1:], dtype=np.int64)) // groups
    grouped = tf.reshape(x, newshape=(shape[0], groups, per_group))
    y = standardize(grouped, (2,), float(node.attr("epsilon", 1e-5)), dtype).y
    if node.opset < 21:
        y = ew.add(ew.multiply(y, tf.reshape(scale, newshape=(groups, 1))), tf.reshape(bias, newshape=(groups, 1)))
        return tf.reshape(y, newshape=shape)
    y = tf.reshape(y, newshape=shape)
    return ew.add(ew.multiply(y, _per_channel(scale, ctx, len(shape))), _per_channel(bias, ctx, len(shape)))


# ------------------------------------------------------------- LRN, MVN, Lp
@converter("LRN", since=1)
def lrn(node: Node, ctx: ImportContext) -> Expr:
    return norm.lrn(node.input(0), size=int(node.attr("size")), alpha=float(node.attr("alpha", 1e-4)),
                    beta=float(node.attr("beta", 0.75)), bias=float(node.attr("bias", 1.0)))


@converter("MeanVarianceNormalization", since=9)
def mean_variance_norm(node: Node, ctx: ImportContext) -> Expr:
    """(x - mean) / (sqrt(var) + 1e-9), as the ONNX function body defines it."""
    x = node.input(0)
    ndim, dtype = len(ctx.shape_of(x)), ctx.dtype_of(x)
    axes = tuple(_normalize_axis(node, a, ndim) for a in ints(node.attr("axes", [0, 2, 3])))
    mean = red.mean(x, axes=axes, keepdims=True)
    centered = ew.subtract(x, mean)
    std = ew.sqrt(red.mean(ew.multiply(centered, centered), axes=axes, keepdims=True))
    return ew.divide(centered, ew.add(std, scalar(1e-9, dtype)))


@converter("LpNormalization", since=1)
def lp_norm(node: Node, ctx: ImportContext) -> Expr:
    """x / ||x||_p along `axis`; 0 where the norm is 0 (as the ONNX reference)."""
    x = node.input(0)
    ndim, dtype = len(ctx.shape_of(x)), ctx.dtype_of(x)
    axis = _normalize_axis(node, int(node.attr("axis", -1)), ndim)
    p = int(node.attr("p", 2))
    if p == 1:
        total = red.sum(ew.abs(x), axes=(axis,), keepdims=True)
    elif p == 2:
        total = ew.sqrt(red.sum(ew.multiply(x, x), axes=(axis,), keepdims=True))
    else:
        raise node.error(f"p={p} is not valid; LpNormalization takes p=1 or p=2")
    zero = scalar(0, dtype)
    return ew.where(ew.equal(total, zero), zero, ew.divide(x, total))
