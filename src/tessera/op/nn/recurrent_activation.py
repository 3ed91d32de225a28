"""The gate activations of recurrent layers (ONNX LSTM/GRU/RNN `activations`).

Each kind has a scalar TIR rule and its NumPy twin (the reference). Some
take `alpha` and `beta`; an `Activation` carries both, already defaulted,
so the kernel never needs to know which kinds use them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...tir import expr as E
from .. import elemwise_rules as R


class ActivationKind(enum.Enum):
    RELU = "Relu"
    TANH = "Tanh"
    SIGMOID = "Sigmoid"
    AFFINE = "Affine"
    LEAKY_RELU = "LeakyRelu"
    THRESHOLDED_RELU = "ThresholdedRelu"
    SCALED_TANH = "ScaledTanh"
    HARD_SIGMOID = "HardSigmoid"
    ELU = "Elu"
    SOFTSIGN = "Softsign"
    SOFTPLUS = "Softplus"


@dataclass(frozen=True)
class Activation:
    kind: ActivationKind
    alpha: float = 0.0
    beta: float = 0.0


Rule = Callable[[E.PrimExpr, float, float], E.PrimExpr]
NpRule = Callable[[np.ndarray, float, float], np.ndarray]


def _c(value: float, like: E.PrimExpr) -> E.PrimExpr:
    return E.const(value, like.dtype)


def _call(fn: E.Intrinsic, x: E.PrimExpr) -> E.PrimExpr:
    return E.call(fn, [x], x.dtype)


def _sigmoid(x: E.PrimExpr) -> E.PrimExpr:
    one = _c(1, x)
    return E.div(one, E.add(one, _call(E.Intrinsic.EXP, E.neg(x))))


def _hard_sigmoid(x: E.PrimExpr, a: float, b: float) -> E.PrimExpr:
    v = E.add(E.mul(_c(a, x), x), _c(b, x))
    return R.maximum(_c(0, x), R.minimum(_c(1, x), v))


def _elu(x: E.PrimExpr, a: float, b: float) -> E.PrimExpr:
    negative = E.mul(_c(a, x), E.sub(_call(E.Intrinsic.EXP, x), _c(1, x)))
    return E.select(E.ge(x, _c(0, x)), x, negative)


_RULES: dict[ActivationKind, Rule] = {
    ActivationKind.RELU: lambda x, a, b: E.select(E.lt(x, _c(0, x)), _c(0, x), x),
    ActivationKind.TANH: lambda x, a, b: _call(E.Intrinsic.TANH, x),
    ActivationKind.SIGMOID: lambda x, a, b: _sigmoid(x),
    ActivationKind.AFFINE: lambda x, a, b: E.add(E.mul(_c(a, x), x), _c(b, x)),
    ActivationKind.LEAKY_RELU: lambda x, a, b: E.select(E.ge(x, _c(0, x)), x, E.mul(_c(a, x), x)),
    ActivationKind.THRESHOLDED_RELU: lambda x, a, b: E.select(E.gt(x, _c(a, x)), x, _c(0, x)),
    ActivationKind.SCALED_TANH: lambda x, a, b: E.mul(_c(a, x), _call(E.Intrinsic.TANH, E.mul(_c(b, x), x))),
    ActivationKind.HARD_SIGMOID: _hard_sigmoid,
    ActivationKind.ELU: _elu,
    ActivationKind.SOFTSIGN: lambda x, a, b: E.div(x, E.add(_c(1, x), _call(E.Intrinsic.FABS, x))),
    ActivationKind.SOFTPLUS: lambda x, a, b: R.softplus(x),
}

_NP_RULES: dict[ActivationKind, NpRule] = {
    ActivationKind.RELU: lambda x, a, b: np.maximum(x, 0),
    ActivationKind.TANH: lambda x, a, b: np.tanh(x),
    ActivationKind.SIGMOID: lambda x, a, b: 1 / (1 + np.exp(-x)),
    ActivationKind.AFFINE: lambda x, a, b: a * x + b,
    ActivationKind.LEAKY_RELU: lambda x, a, b: np.where(x >= 0, x, a * x),
    ActivationKind.THRESHOLDED_RELU: lambda x, a, b: np.where(x > a, x, 0),
    ActivationKind.SCALED_TANH: lambda x, a, b: a * np.tanh(b * x),
    ActivationKind.HARD_SIGMOID: lambda x, a, b: np.clip(a * x + b, 0, 1),
    ActivationKind.ELU: lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)),
    ActivationKind.SOFTSIGN: lambda x, a, b: x / (1 + np.abs(x)),
    ActivationKind.SOFTPLUS: lambda x, a, b: R.np_softplus(x),
}

# The alpha and beta each kind reads, with the defaults of the ONNX operator of
# the same name; the others take neither and skip `activation_alpha/beta` entries.
ALPHA_DEFAULTS: dict[ActivationKind, float] = {
    ActivationKind.AFFINE: 1.0, ActivationKind.LEAKY_RELU: 0.01, ActivationKind.THRESHOLDED_RELU: 1.0,
    ActivationKind.SCALED_TANH: 1.0, ActivationKind.HARD_SIGMOID: 0.2, ActivationKind.ELU: 1.0,
}
BETA_DEFAULTS: dict[ActivationKind, float] = {
    ActivationKind.AFFINE: 0.0, ActivationKind.SCALED_TANH: 1.0, ActivationKind.HARD_SIGMOID: 0.5,
}


def apply(act: Activation, x: E.PrimExpr) -> E.PrimExpr:
    return _RULES[act.kind](x, act.alpha, act.beta)


def apply_np(act: Activation, x: np.ndarray) -> np.ndarray:
    return np.asarray(_NP_RULES[act.kind](x, act.alpha, act.beta), dtype=x.dtype)


def parse_kind(name: str) -> ActivationKind:
    """The kind named `name` (case-insensitive, as onnxruntime reads it)."""
    by_name = {k.value.lower(): k for k in ActivationKind}
    kind = by_name.get(name.lower())
    if kind is None:
        raise ValueError(f"unknown recurrent activation {name!r}; expected one of "
                         f"{', '.join(k.value for k in ActivationKind)}")
    return kind
