"""Converters for activation functions (Relu, Elu, Gelu, PRelu, Clip, ...)."""

from __future__ import annotations

import math

import numpy as np

from ....op import elemwise as ew
from ....op import transform as tf
from ....op.elemwise_activation import broadcasts_to
from ....op.registry import Op
from .... import dtype as dt
from ....relay.expr import Expr, const
from ..importer import ImportContext, Node
from ..registry import converter

# op type -> (Relay op, ONNX attribute defaults (same names as the Relay attributes), first opset)
ACTIVATIONS: dict[str, tuple[Op, dict[str, float], int]] = {
    "Relu": (ew.relu, {}, 1),
    "Softplus": (ew.softplus, {}, 1),
    "Softsign": (ew.softsign, {}, 1),
    "Mish": (ew.mish, {}, 18),
    "HardSwish": (ew.hard_swish, {}, 14),
    "LeakyRelu": (ew.leaky_relu, {"alpha": 0.01}, 1),
    "ThresholdedRelu": (ew.thresholded_relu, {"alpha": 1.0}, 10),
    "Elu": (ew.elu, {"alpha": 1.0}, 1),
    "Celu": (ew.celu, {"alpha": 1.0}, 12),
    "Selu": (ew.selu, {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}, 1),
    "HardSigmoid": (ew.hard_sigmoid, {"alpha": 0.2, "beta": 0.5}, 1),
    "Shrink": (ew.shrink, {"lambd": 0.5, "bias": 0.0}, 9),
}


def _register(op_type: str, op: Op, defaults: dict[str, float], since: int) -> None:
    @converter(op_type, since=since)
    def convert(node: Node, ctx: ImportContext) -> Expr:
        attrs = {name: float(node.attr(name, default)) for name, default in defaults.items()}
        return op(node.input(0), **attrs)


for _name, (_op, _defaults, _since) in ACTIVATIONS.items():
    _register(_name, _op, _defaults, _since)


@converter("Gelu", since=20)
def gelu(node: Node, ctx: ImportContext) -> Expr:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.error(f"approximate={approximate!r} is not valid; expected 'none' or 'tanh'")
    return ew.gelu(node.input(0), approximate=approximate)


# -------------------------------------------------------------------- clip
def _scalar_bound(node: Node, ctx: ImportContext, k: int, what: str) -> Expr | None:
    """Clip's optional min/max input as a 0-d tensor (it may hold one element)."""
    bound = node.optional_input(k)
    if bound is None:
        return None
    shape = ctx.shape_of(bound)
    if math.prod(shape) != 1:
        raise node.error(f"{what} must be a scalar (one element), got shape {shape}")
    return tf.reshape(bound, newshape=()) if shape else bound


def _finite_range(dtype: str) -> tuple[float, float]:
    """Clip's default bounds: numeric_limits lowest() and max(), so +-inf clamp to the largest finite
    values (as the spec says and onnxruntime does); integers are never out of their own range."""
    if not dt.is_float(dtype):
        return -math.inf, math.inf
    limits = np.finfo(dt.to_numpy(dtype))
    return float(limits.min), float(limits.max)


@converter("Clip", since=1)
def clip_attrs(node: Node, ctx: ImportContext) -> Expr:
    """Opsets 1-10: the bounds are attributes."""
    x = node.input(0)
    lo, hi = _finite_range(ctx.dtype_of(x))
    return ew.clip(x, a_min=float(node.attr("min", lo)), a_max=float(node.attr("max", hi)))


@converter("Clip", since=11)
def clip_inputs(node: Node, ctx: ImportContext) -> Expr:
    """Opset 11+: optional min/max inputs, possibly computed at run time.

    min(max(x, lo), hi) is Clip's definition, including lo > hi (gives hi).
    """
    out = node.input(0)
    lo, hi = _scalar_bound(node, ctx, 1, "min"), _scalar_bound(node, ctx, 2, "max")
    dtype = ctx.dtype_of(out)
    if dt.is_float(dtype) and (lo is None) != (hi is None):  # one bound given: the other is the finite limit
        lowest, highest = _finite_range(dtype)
        lo = const(lowest, dtype) if lo is None else lo
        hi = const(highest, dtype) if hi is None else hi
    if lo is not None:
        out = ew.maximum(out, lo)
    if hi is not None:
        out = ew.minimum(out, hi)
    return out


# ------------------------------------------------------------------- prelu
def _channel_slope_shape(x_shape: tuple[int, ...], slope_shape: tuple[int, ...], node: Node) -> tuple[int, ...] | None:
    """A 1-d slope laid along the one axis of x of its length (opset < 7 channel slopes)."""
    if len(slope_shape) != 1:
        return None
    if node.opset < 7 and len(x_shape) >= 2 and x_shape[1] == slope_shape[0]:
        return (slope_shape[0],) + (1,) * (len(x_shape) - 2)
    matches = [k for k, d in enumerate(x_shape) if d == slope_shape[0]]
    if len(matches) != 1:
        return None
    return (slope_shape[0],) + (1,) * (len(x_shape) - 1 - matches[0])


@converter("PRelu", since=1)
def prelu(node: Node, ctx: ImportContext) -> Expr:
    x, slope = node.input(0), node.input(1)
    x_shape, slope_shape = ctx.shape_of(x), ctx.shape_of(slope)
    legacy = node.opset < 7 and len(slope_shape) == 1 and slope_shape[0] != 1
    if legacy or not broadcasts_to(slope_shape, x_shape):
        aligned = _channel_slope_shape(x_shape, slope_shape, node)
        if aligned is None:
            raise node.error(f"slope of shape {slope_shape} does not broadcast to the input's shape {x_shape}")
        slope = tf.reshape(slope, newshape=aligned)
    return ew.prelu(x, slope)
