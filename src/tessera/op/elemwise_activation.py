"""Activation functions: elementwise ops, most with scalar attributes.

Each is a frozen attribute dataclass, a scalar rule and its NumPy twin. The
rules propagate NaN like their references (NaN-aware max/min) and use the
cancellation-free expm1/log1p/softplus of elemwise_rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from . import elemwise_rules as R
from ._util import broadcast_shapes, tensors
from .elemwise_base import (
    NUMERIC,
    attr_scalar,
    broadcast_compute,
    check_dtype,
    unary,
    unary_with_attrs,
)
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


def _c(value: float, like: E.PrimExpr) -> E.PrimExpr:
    return E.const(value, like.dtype)


def _exp(x: E.PrimExpr) -> E.PrimExpr:
    return E.call(E.Intrinsic.EXP, [x], x.dtype)


def _tanh(x: E.PrimExpr) -> E.PrimExpr:
    return E.call(E.Intrinsic.TANH, [x], x.dtype)


def _clamp01(v: E.PrimExpr) -> E.PrimExpr:
    return R.maximum(_c(0, v), R.minimum(_c(1, v), v))


def _np_clamp01(v: np.ndarray) -> np.ndarray:
    return np.maximum(v.dtype.type(0), np.minimum(v.dtype.type(1), v))


# ------------------------------------------------------------ no attributes
def _relu(x: E.PrimExpr) -> E.PrimExpr:
    return E.select(E.lt(x, _c(0, x)), _c(0, x), x)  # NaN stays NaN


def _softsign(x: E.PrimExpr) -> E.PrimExpr:
    return E.div(x, E.add(_c(1, x), E.call(E.Intrinsic.FABS, [x], x.dtype)))


def _mish(x: E.PrimExpr) -> E.PrimExpr:
    return E.mul(x, _tanh(R.softplus(x)))


def _hard_swish(x: E.PrimExpr) -> E.PrimExpr:
    return E.mul(x, _clamp01(E.add(E.mul(x, _c(1 / 6, x)), _c(0.5, x))))


def _np_hard_swish(x: np.ndarray) -> np.ndarray:
    return x * _np_clamp01(x * attr_scalar(1 / 6, x) + attr_scalar(0.5, x))


def _silu(x: E.PrimExpr) -> E.PrimExpr:
    # x * Sigmoid(x), as the exporters write SiLU (and Swish with beta 1), taken as x / (1 + exp(-x)):
    # one rounding and one multiplication fewer, and the same values at the ends (-0 below, NaN at -inf)
    one = E.const(1, x.dtype)
    return E.div(x, E.add(one, E.call(E.Intrinsic.EXP, [E.neg(x)], x.dtype)))


relu = unary("nn.relu", _relu, lambda x: np.where(x < 0, x.dtype.type(0), x), NUMERIC)
softplus = unary("nn.softplus", R.softplus, R.np_softplus)
softsign = unary("nn.softsign", _softsign, lambda x: x / (1 + np.abs(x)))
mish = unary("nn.mish", _mish, lambda x: x * np.tanh(R.np_softplus(x)))
hard_swish = unary("nn.hard_swish", _hard_swish, _np_hard_swish)
silu = unary("nn.silu", _silu, lambda x: x / (1 + np.exp(-x)))


# ------------------------------------------------------- scalar attributes
@dataclass(frozen=True)
class LeakyReluAttrs:
    alpha: float = 0.01


def _leaky_relu(x: E.PrimExpr, a: LeakyReluAttrs) -> E.PrimExpr:
    return E.select(E.gt(x, _c(0, x)), x, E.mul(x, _c(a.alpha, x)))


leaky_relu = unary_with_attrs(
    "nn.leaky_relu", LeakyReluAttrs, _leaky_relu,
    lambda x, a: np.where(x > 0, x, x * attr_scalar(a.alpha, x)),
)


@dataclass(frozen=True)
class ThresholdedReluAttrs:
    alpha: float = 1.0


thresholded_relu = unary_with_attrs(
    "nn.thresholded_relu", ThresholdedReluAttrs,
    lambda x, a: E.select(E.gt(x, _c(a.alpha, x)), x, _c(0, x)),
    lambda x, a: np.where(x > attr_scalar(a.alpha, x), x, x.dtype.type(0)),
)


@dataclass(frozen=True)
class EluAttrs:
    alpha: float = 1.0


elu = unary_with_attrs(
    "nn.elu", EluAttrs,
    lambda x, a: E.select(E.gt(x, _c(0, x)), x, E.mul(_c(a.alpha, x), R.expm1(x))),
    lambda x, a: np.where(x > 0, x, attr_scalar(a.alpha, x) * np.expm1(x)),
)


@dataclass(frozen=True)
class SeluAttrs:
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875


def _selu(x: E.PrimExpr, a: SeluAttrs) -> E.PrimExpr:
    negative = E.mul(_c(a.alpha, x), R.expm1(x))
    return E.mul(_c(a.gamma, x), E.select(E.gt(x, _c(0, x)), x, negative))


def _np_selu(x: np.ndarray, a: SeluAttrs) -> np.ndarray:
    negative = attr_scalar(a.alpha, x) * np.expm1(x)
    return attr_scalar(a.gamma, x) * np.where(x > 0, x, negative)


selu = unary_with_attrs("nn.selu", SeluAttrs, _selu, _np_selu)


@dataclass(frozen=True)
class CeluAttrs:
    alpha: float = 1.0


def _celu(x: E.PrimExpr, a: CeluAttrs) -> E.PrimExpr:
    alpha = _c(a.alpha, x)
    negative = E.mul(alpha, R.expm1(E.div(x, alpha)))
    return E.add(R.maximum(_c(0, x), x), R.minimum(_c(0, x), negative))


def _np_celu(x: np.ndarray, a: CeluAttrs) -> np.ndarray:
    alpha = attr_scalar(a.alpha, x)
    zero = x.dtype.type(0)
    return np.maximum(zero, x) + np.minimum(zero, alpha * np.expm1(x / alpha))


celu = unary_with_attrs("nn.celu", CeluAttrs, _celu, _np_celu)


@dataclass(frozen=True)
class HardSigmoidAttrs:
    alpha: float = 0.2
    beta: float = 0.5


hard_sigmoid = unary_with_attrs(
    "nn.hard_sigmoid", HardSigmoidAttrs,
    lambda x, a: _clamp01(E.add(E.mul(x, _c(a.alpha, x)), _c(a.beta, x))),
    lambda x, a: _np_clamp01(x * attr_scalar(a.alpha, x) + attr_scalar(a.beta, x)),
)


GELU_APPROXIMATIONS = ("none", "tanh")


@dataclass(frozen=True)
class GeluAttrs:
    approximate: str = "none"  # or "tanh"

    def __post_init__(self) -> None:
        if self.approximate not in GELU_APPROXIMATIONS:
            raise TypeInferenceError(
                f"gelu: approximate={self.approximate!r} is not valid; expected one of {GELU_APPROXIMATIONS}"
            )


def _gelu_inner(x: E.PrimExpr, approximate: str) -> E.PrimExpr:
    """The erf (or tanh) term t of gelu(x) = 0.5 * x * (1 + t)."""
    if approximate == "tanh":
        cube = E.mul(E.mul(x, x), x)
        return _tanh(E.mul(_c(R.SQRT_2_OVER_PI, x), E.add(x, E.mul(_c(0.044715, x), cube))))
    return E.call(E.Intrinsic.ERF, [E.mul(x, _c(R.SQRT1_2, x))], x.dtype)


def _np_gelu(x: np.ndarray, a: GeluAttrs) -> np.ndarray:
    if a.approximate == "tanh":
        inner = np.tanh(attr_scalar(R.SQRT_2_OVER_PI, x) * (x + attr_scalar(0.044715, x) * x * x * x))
    else:
        inner = R.np_erf(x * attr_scalar(R.SQRT1_2, x))
    return attr_scalar(0.5, x) * x * (1 + inner)


gelu = unary_with_attrs(
    "nn.gelu", GeluAttrs,
    lambda x, a: E.mul(E.mul(_c(0.5, x), x), E.add(_c(1, x), _gelu_inner(x, a.approximate))),
    _np_gelu,
)


@dataclass(frozen=True)
class ShrinkAttrs:
    lambd: float = 0.5
    bias: float = 0.0


def _shrink_dtype(d: str) -> str:
    """Integers are compared with the float thresholds in float64."""
    return d if dt.is_float(d) else "float64"


def _shrink(x: E.PrimExpr, a: ShrinkAttrs) -> E.PrimExpr:
    v = E.cast(x, _shrink_dtype(x.dtype))
    lambd, bias = _c(a.lambd, v), _c(a.bias, v)
    inner = E.select(E.gt(v, lambd), E.sub(v, bias), _c(0, v))
    return R.cast(E.select(E.lt(v, E.neg(lambd)), E.add(v, bias), inner), x.dtype)


def _np_shrink(x: np.ndarray, a: ShrinkAttrs) -> np.ndarray:
    v = x.astype(_shrink_dtype(x.dtype.name))
    lambd, bias = attr_scalar(a.lambd, v), attr_scalar(a.bias, v)
    out = np.where(v < np.negative(lambd), v + bias, np.where(v > lambd, v - bias, v.dtype.type(0)))
    return R.np_cast(out, x.dtype.name)


shrink = unary_with_attrs("nn.shrink", ShrinkAttrs, _shrink, _np_shrink, NUMERIC)


@dataclass(frozen=True)
class ClipAttrs:
    a_min: float
    a_max: float


def _clip(x: E.PrimExpr, a: ClipAttrs) -> E.PrimExpr:
    lo = E.const(max(a.a_min, dt.min_value(x.dtype)), x.dtype)
    hi = E.const(min(a.a_max, dt.max_value(x.dtype)), x.dtype)
    return R.minimum(R.maximum(x, lo), hi)


clip = unary_with_attrs(
    "clip", ClipAttrs, _clip, lambda x, a: np.clip(x, a.a_min, a.a_max), NUMERIC,
)


# ---------------------------------------------------- prelu: a slope tensor
def _prelu_type(types: tuple[Type, ...], attrs: object) -> Type:
    x, slope = tensors(types)
    check_dtype("nn.prelu", x.dtype, NUMERIC)
    if slope.dtype != x.dtype:
        raise TypeInferenceError(f"nn.prelu: slope has dtype {slope.dtype}, expected {x.dtype} (the input's)")
    if not broadcasts_to(slope.shape, x.shape):
        raise TypeInferenceError(
            f"nn.prelu: slope of shape {tuple(slope.shape)} does not broadcast to the input's shape {tuple(x.shape)}"
        )
    return TensorType(x.shape, x.dtype)


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `target` without growing it (unidirectional)."""
    try:
        return broadcast_shapes(target, shape) == tuple(target)
    except TypeInferenceError:
        return False


def _prelu_rule(x: E.PrimExpr, slope: E.PrimExpr) -> E.PrimExpr:
    return E.select(E.gt(x, _c(0, x)), x, R.wrapping(E.mul)(x, slope))


def _prelu_compute(inputs: list[te.Tensor], attrs: object, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    return broadcast_compute(inputs, out, _prelu_rule, "prelu")


def _prelu_ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
    x, slope = args
    with np.errstate(all="ignore"):
        return np.where(x > 0, x, x * slope).astype(x.dtype)


prelu = register_op(
    "nn.prelu", type_rel=_prelu_type, reference=_prelu_ref, pattern=OpPattern.BROADCAST,
    compute=_prelu_compute, num_inputs=2, doc="x if x > 0 else slope * x; slope broadcasts to x",
)
