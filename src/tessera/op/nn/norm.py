"""Normalisation operators. SimplifyInference rewrites batch_norm into a
per-channel multiply-add that folds into the preceding convolution."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...tir import expr as E
from .._util import normalize_axis, same_dtype, tensors
from ..registry import OpPattern, register_op


@dataclass(frozen=True)
class BatchNormAttrs:
    axis: int = 1
    epsilon: float = 1e-5


def _bn_type(types: tuple[Type, ...], attrs: BatchNormAttrs) -> Type:
    x, gamma, beta, mean, var = tensors(types)
    dtype = same_dtype([x, gamma, beta, mean, var])
    axis = normalize_axis(attrs.axis, x.ndim)
    for name, t in (("scale", gamma), ("bias", beta), ("mean", mean), ("variance", var)):
        if t.shape != (x.shape[axis],):
            raise TypeInferenceError(f"batch_norm {name} must have shape ({x.shape[axis]},), got {t.shape}")
    return TensorType(x.shape, dtype)


def _channel_shape(ndim: int, axis: int, c: int) -> tuple[int, ...]:
    return tuple(c if k == axis else 1 for k in range(ndim))


def _bn_ref(args: list[np.ndarray], attrs: BatchNormAttrs) -> np.ndarray:
    x, gamma, beta, mean, var = args
    shape = _channel_shape(x.ndim, normalize_axis(attrs.axis, x.ndim), x.shape[attrs.axis])
    scale = gamma / np.sqrt(var + np.asarray(attrs.epsilon, x.dtype))
    return (x * scale.reshape(shape) + (beta - mean * scale).reshape(shape)).astype(x.dtype)


def _bn_compute(inputs: list[te.Tensor], attrs: BatchNormAttrs, out: TensorType) -> te.Tensor:
    x, gamma, beta, mean, var = inputs
    axis = normalize_axis(attrs.axis, x.ndim)

    def element(*i: E.Var) -> E.PrimExpr:
        c = i[axis]
        eps = E.const(attrs.epsilon, x.dtype)
        scale = E.div(gamma[c], E.call(E.Intrinsic.SQRT, [E.add(var[c], eps)], x.dtype))
        return E.add(E.mul(E.sub(x[i], mean[c]), scale), beta[c])

    return te.compute(x.shape, element, name="batch_norm")


batch_norm = register_op(
    "nn.batch_norm", type_rel=_bn_type, reference=_bn_ref, pattern=OpPattern.BROADCAST,
    compute=_bn_compute, attrs=BatchNormAttrs, num_inputs=5,
    doc="Inference-mode batch normalisation: (x - mean) / sqrt(var + eps) * scale + bias.",
)
