"""Softmax and log-softmax along one axis (max-subtracted, so exp never overflows)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtype as dt
from ... import te
from ...relay.ty import TensorType, Type
from ...tir import expr as E
from .._util import as_tensor, normalize_axis
from ..registry import OpPattern, register_op


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1


def _type(types: tuple[Type, ...], attrs: SoftmaxAttrs) -> Type:
    x = as_tensor(types[0])
    normalize_axis(attrs.axis, x.ndim)
    return x


def _stats(x: te.Tensor, axis: int) -> tuple[te.Tensor, te.Tensor]:
    """max and sum(exp(x - max)) along `axis`, kept as size-1 dims."""
    shape = tuple(1 if k == axis else s for k, s in enumerate(x.shape))
    r1 = te.reduce_axis(x.shape[axis], "r")
    r2 = te.reduce_axis(x.shape[axis], "r")

    def at(i: tuple[E.Var, ...], r: te.IterVar) -> tuple[E.PrimExpr, ...]:
        return tuple(r.var if k == axis else v for k, v in enumerate(i))

    lowest = E.const(dt.min_value(x.dtype), x.dtype)
    top = te.compute(shape, lambda *i: te.max_reduce(E.maximum(x[at(i, r1)], lowest), r1), name="softmax_max")

    def exp_sum(*i: E.Var) -> E.PrimExpr:
        shifted = E.sub(x[at(i, r2)], top[i])
        return te.sum(E.call(E.Intrinsic.EXP, [shifted], x.dtype), r2)

    total = te.compute(shape, exp_sum, name="softmax_sum")
    return top, total


def _softmax_compute(inputs: list[te.Tensor], attrs: SoftmaxAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    top, total = _stats(x, axis)

    def element(*i: E.Var) -> E.PrimExpr:
        j = tuple(E.IntImm(0) if k == axis else v for k, v in enumerate(i))
        return E.div(E.call(E.Intrinsic.EXP, [E.sub(x[i], top[j])], x.dtype), total[j])

    return te.compute(x.shape, element, name="softmax")


def _log_softmax_compute(inputs: list[te.Tensor], attrs: SoftmaxAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    top, total = _stats(x, axis)

    def element(*i: E.Var) -> E.PrimExpr:
        j = tuple(E.IntImm(0) if k == axis else v for k, v in enumerate(i))
        return E.sub(E.sub(x[i], top[j]), E.call(E.Intrinsic.LOG, [total[j]], x.dtype))

    return te.compute(x.shape, element, name="log_softmax")


def _softmax_ref(args: list[np.ndarray], attrs: SoftmaxAttrs) -> np.ndarray:
    x = args[0]
    e = np.exp(x - x.max(axis=attrs.axis, keepdims=True))
    return (e / e.sum(axis=attrs.axis, keepdims=True)).astype(x.dtype)


def _log_softmax_ref(args: list[np.ndarray], attrs: SoftmaxAttrs) -> np.ndarray:
    x = args[0]
    s = x - x.max(axis=attrs.axis, keepdims=True)
    return (s - np.log(np.exp(s).sum(axis=attrs.axis, keepdims=True))).astype(x.dtype)


softmax = register_op("nn.softmax", type_rel=_type, reference=_softmax_ref, pattern=OpPattern.OPAQUE,
                      compute=_softmax_compute, attrs=SoftmaxAttrs, num_inputs=1)
log_softmax = register_op("nn.log_softmax", type_rel=_type, reference=_log_softmax_ref, pattern=OpPattern.OPAQUE,
                          compute=_log_softmax_compute, attrs=SoftmaxAttrs, num_inputs=1)
