"""Generators for normalisations and (de)quantisation.

A normalisation divides by sqrt(variance + epsilon): for nearly constant
groups the rounding noise of (x - mean) is amplified by up to
1/sqrt(epsilon), which the tolerance allows for. Quantisation rounds, so
it takes exact inputs only, and power-of-two scales (whose division is
exact, so halfway cases round the same everywhere).
"""

from __future__ import annotations

import math

import numpy as np

from .graph import FLOATS, Facts, GraphBuilder, Reject, Value
from .ops_nn import as_spatial
from .spec import MAX_AMP, exact_or, near_zero_amp, pick_axis, register

EPSILONS = (1e-5, 1e-2, 0.5)


def _norm_fact(x: Value, inputs: list[Value], k: int, epsilon: float, bound: float,
               stash: str | None = None) -> Facts:
    """`stash`: the dtype statistics are kept in (LayerNormalization's stash_type: float32 by default)."""
    amp = max(1.0, min(x.magnitude, 1e3) / math.sqrt(epsilon))
    # the op's own rounding of x - mean is amplified as much as its input's error
    return {"lo": -bound, "hi": bound, "finite": x.finite,
            "tol": exact_or(stash or x.dtype, inputs, (2 * k + 16) * amp, amp)}


def _affine_bound(k: int, scale: Value, bias: Value) -> float:
    return math.sqrt(max(k, 1)) * scale.magnitude + bias.magnitude


@register("BatchNormalization", "norm", dtypes=FLOATS, min_rank=2)
def _batch_norm(g: GraphBuilder, v: Value) -> list[Value]:
    c = v.shape[1]
    scale, bias, mean = (g.leaf(v.dtype, (c,), lo=-2, hi=2) for _ in range(3))
    var = g.leaf(v.dtype, (c,), lo=0.25, hi=4)
    epsilon = g.chooser.choice(EPSILONS)
    bound = (v.magnitude + mean.magnitude) / math.sqrt(epsilon) * scale.magnitude + bias.magnitude
    fact: Facts = {"lo": -bound, "hi": bound, "finite": v.finite,
            "tol": exact_or(v.dtype, [v, scale, bias, mean, var], 16, 2.0)}
    return g.node("BatchNormalization", [v, scale, bias, mean, var], {"epsilon": epsilon}, [fact])


@register("InstanceNormalization", "norm", dtypes=("float32",))
def _instance_norm(g: GraphBuilder, v: Value) -> list[Value]:
    x = as_spatial(g, v)
    c = x.shape[1]
    scale, bias = g.leaf(x.dtype, (c,), lo=-2, hi=2), g.leaf(x.dtype, (c,), lo=-2, hi=2)
    epsilon = g.chooser.choice(EPSILONS)
    k = math.prod(x.shape[2:])
    return g.node("InstanceNormalization", [x, scale, bias], {"epsilon": epsilon},
                  [_norm_fact(x, [x, scale, bias], k, epsilon, _affine_bound(k, scale, bias))])


@register("LayerNormalization", "norm", dtypes=FLOATS, min_rank=1, min_opset=17)
def _layer_norm(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    normalized = v.shape[axis % v.rank:]
    k = math.prod(normalized)
    if k == 0:
        raise Reject("empty normalisation")
    scale_shape = normalized if g.chooser.boolean(0.7) else normalized[-1:]
    scale = g.leaf(v.dtype, scale_shape, lo=-2, hi=2)
    inputs = [v, scale]
    bias = None
    if g.chooser.boolean(0.6):
        bias = g.leaf(v.dtype, scale_shape, lo=-2, hi=2)
        inputs.append(bias)
    epsilon = g.chooser.choice(EPSILONS)
    bound = math.sqrt(k) * scale.magnitude + (bias.magnitude if bias else 0.0)
    return g.node("LayerNormalization", inputs, {"axis": axis, "epsilon": epsilon},
                  [_norm_fact(v, inputs, k, epsilon, bound, "float32")])


@register("GroupNormalization", "norm", dtypes=FLOATS[:1], min_opset=18)
def _group_norm(g: GraphBuilder, v: Value) -> list[Value]:
    x = as_spatial(g, v)
    c = x.shape[1]
    groups = g.chooser.choice([d for d in range(1, c + 1) if c % d == 0])
    scale_len = groups if g.opset < 21 else c  # opset 18 scales per group, 21 per channel
    scale, bias = g.leaf(x.dtype, (scale_len,), lo=-2, hi=2), g.leaf(x.dtype, (scale_len,), lo=-2, hi=2)
    epsilon = g.chooser.choice(EPSILONS)
    k = c // groups * math.prod(x.shape[2:])
    return g.node("GroupNormalization", [x, scale, bias], {"epsilon": epsilon, "num_groups": groups},
                  [_norm_fact(x, [x, scale, bias], k, epsilon, _affine_bound(k, scale, bias))])


@register("LRN", "norm", dtypes=FLOATS[:1])
def _lrn(g: GraphBuilder, v: Value) -> list[Value]:
    x = as_spatial(g, v, (2,))
    attrs = {"size": g.chooser.choice((1, 3, 5)), "alpha": g.chooser.choice((1e-4, 0.1, 1.0)),
             "beta": g.chooser.choice((0.75, 0.5, 1.0)), "bias": g.chooser.choice((1.0, 2.0))}
    return g.node("LRN", [x], attrs, [{"lo": -x.magnitude, "hi": x.magnitude, "finite": x.finite,
                                       "tol": exact_or(x.dtype, [x], 64 + 4 * attrs["size"], 2.0)}])


@register("MeanVarianceNormalization", "norm", dtypes=FLOATS[:1], min_rank=1)
def _mvn(g: GraphBuilder, v: Value) -> list[Value]:
    """On data of known variance only: its epsilon (1e-9) makes near-constant groups ill-conditioned,
    and onnxruntime returns NaN for constant ones (E[x^2] - E[x]^2 < 0 after rounding)."""
    axes = sorted({a for a in range(v.rank) if g.chooser.boolean(0.6)} or {v.rank - 1})
    k = math.prod(v.shape[a] for a in axes)
    if k < 2:
        raise Reject("a variance over one element")
    x = v
    if not _spread(g.data.get(v.name), tuple(axes)):
        x = g.input(np.asarray(g.rng.standard_normal(v.shape), dtype=v.dtype))
        if not _spread(g.data[x.name], tuple(axes)):
            raise Reject("no spread in the data")
    return g.node("MeanVarianceNormalization", [x], {"axes": axes},
                  [_norm_fact(x, [x], k, 1e-2, math.sqrt(k))])


def _spread(data: np.ndarray | None, axes: tuple[int, ...]) -> bool:
    """Whether every group of `data` along `axes` has a variance well above rounding noise."""
    return data is not None and data.size > 0 and float(np.min(np.var(data, axis=axes))) > 1e-2


@register("LpNormalization", "norm", dtypes=FLOATS, min_rank=1)
def _lp_norm(g: GraphBuilder, v: Value) -> list[Value]:
    """x / ||x||: without an epsilon, a small norm amplifies the input's error without bound, so
    inexact inputs must stay away from 0 (the norm is then at least their smallest magnitude)."""
    amp = near_zero_amp(v)
    if amp > MAX_AMP:
        raise Reject("LpNormalization of inexact values near 0 is ill-conditioned")
    axis = pick_axis(g, v)
    k = v.shape[axis]
    return g.node("LpNormalization", [v], {"axis": axis, "p": g.chooser.choice((1, 2))},
                  [{"lo": -1.0, "hi": 1.0, "finite": False, "tol": exact_or(v.dtype, [v], 2 * k + 8, amp)}])


# ------------------------------------------------------------ quantisation
SCALES = (0.5, 0.25, 0.125, 1.0, 2.0)
QUANT = {"int8": (-128, 127), "uint8": (0, 255)}


def _quant_params(g: GraphBuilder, x: Value, dtype: str, per_axis: bool, axis: int) -> list[Value]:
    lo, hi = QUANT[dtype]
    if per_axis:
        n = x.shape[axis]
        scale = g.constant(np.asarray([g.chooser.choice(SCALES) for _ in range(n)], np.float32), reusable=False)
        zp = g.constant(g.rng.integers(max(lo, -8), min(hi, 8) + 1, size=n).astype(dtype), reusable=False)
        return [scale, zp]
    zero = g.chooser.integer(max(lo, -8), min(hi, 8))
    return [g.scalar(g.chooser.choice(SCALES), "float32"), g.scalar(zero, dtype)]


@register("QuantizeLinear", "norm", dtypes=("float32",), needs_exact=True, min_opset=13)
def _quantize(g: GraphBuilder, v: Value) -> list[Value]:
    if not v.finite:
        raise Reject("quantising NaN")
    dtype = g.chooser.choice(tuple(QUANT))
    per_axis = v.rank > 0 and g.chooser.boolean(0.3)
    axis = pick_axis(g, v) if per_axis else 1
    params = _quant_params(g, v, dtype, per_axis, axis % max(v.rank, 1))
    attrs = {"axis": axis} if per_axis else {}
    lo, hi = QUANT[dtype]
    return g.node("QuantizeLinear", [v, *params], attrs, [{"lo": lo, "hi": hi, "finite": True}])


@register("DequantizeLinear", "norm", dtypes=("int8", "uint8", "int32"), min_opset=13)
def _dequantize(g: GraphBuilder, v: Value) -> list[Value]:
    per_axis = v.rank > 0 and g.chooser.boolean(0.3)
    axis = pick_axis(g, v) if per_axis else 1
    if v.dtype == "int32":  # the zero point of int32 must be 0
        params = [g.scalar(g.chooser.choice(SCALES), "float32")]
    else:
        params = _quant_params(g, v, v.dtype, per_axis, axis % max(v.rank, 1))
    attrs = {"axis": axis} if per_axis else {}
    m = (v.magnitude + 8) * max(SCALES)
    return g.node("DequantizeLinear", [v, *params], attrs, [{"lo": -m, "hi": m, "finite": True, "tol": 0.0}])
