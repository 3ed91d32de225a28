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
from ..schedule_context import ScheduleContext


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


def _bn_compute(inputs: list[te.Tensor], attrs: BatchNormAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
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


@dataclass(frozen=True)
class LRNAttrs:
    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0
    axis: int = 1


def _same(types: tuple[Type, ...], attrs: object) -> Type:
    (x,) = tensors(types)
    return x


def _lrn_window(size: int) -> tuple[int, int]:
    """Channels before and after the centre that the window covers (ONNX)."""
    return (size - 1) // 2, size - 1 - (size - 1) // 2


def _lrn_ref(args: list[np.ndarray], a: LRNAttrs) -> np.ndarray:
    x = args[0]
    before, after = _lrn_window(a.size)
    sq = np.zeros_like(x, dtype=np.float64)
    c = x.shape[a.axis]
    xs = np.moveaxis(x.astype(np.float64) ** 2, a.axis, 0)
    acc = np.moveaxis(sq, a.axis, 0)
    for k in range(c):
        acc[k] = xs[max(0, k - before): min(c, k + after + 1)].sum(axis=0)
    acc = np.moveaxis(acc, 0, a.axis)
    return (x / (a.bias + a.alpha / a.size * acc) ** a.beta).astype(x.dtype)


def _lrn_compute(inputs: list[te.Tensor], a: LRNAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    axis = normalize_axis(a.axis, x.ndim)
    before, _ = _lrn_window(a.size)
    r = te.reduce_axis(a.size, "r")
    channels = x.shape[axis]

    def square_sum(*i: E.Var) -> E.PrimExpr:
        c = E.add(E.sub(i[axis], before), r.var)
        inside = E.logical_and(E.ge(c, 0), E.lt(c, channels))
        idx: list[E.PrimExpr] = list(i)
        idx[axis] = E.minimum(E.maximum(c, 0), channels - 1)
        v = x[tuple(idx)]
        return te.sum(E.select(inside, E.mul(v, v), E.const(0, x.dtype)), r)

    total = te.compute(x.shape, square_sum, name="lrn_sum")

    def element(*i: E.Var) -> E.PrimExpr:
        scale = E.add(E.const(a.bias, x.dtype), E.mul(E.const(a.alpha / a.size, x.dtype), total[i]))
        return E.div(x[i], _power(scale, a.beta))

    return te.compute(x.shape, element, name="lrn")


def _power(base: E.PrimExpr, exponent: float) -> E.PrimExpr:
    """`base ** exponent` for LRN's positive base. The common exponents are square roots, which vectorise
    (AlexNet's, ZFNet's and GoogLeNet's 0.75: powf took 22 ns an element, 6.3 ms of AlexNet's first LRN at
    one thread on an AMD EPYC); others call pow."""
    root = E.call(E.Intrinsic.SQRT, [base], base.dtype)
    by_exponent = {0.5: lambda: root, 1.0: lambda: base,
                   0.75: lambda: E.mul(root, E.call(E.Intrinsic.SQRT, [root], base.dtype))}
    make = by_exponent.get(exponent)
    return make() if make is not None else E.binary(E.BinOp.POW, base, E.const(exponent, base.dtype))


lrn = register_op(
    "nn.lrn", type_rel=_same, reference=_lrn_ref, pattern=OpPattern.OPAQUE, compute=_lrn_compute,
    attrs=LRNAttrs, num_inputs=1, doc="Local response normalisation across channels.",
)
