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
from ..schedule_context import ScheduleContext
from .softmax_rows import softmax_rows


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1


def _type(types: tuple[Type, ...], attrs: SoftmaxAttrs) -> Type:
    x = as_tensor(types[0])
    normalize_axis(attrs.axis, x.ndim)
    return x


def _at(i: tuple[E.Var, ...], axis: int, r: te.IterVar) -> tuple[E.PrimExpr, ...]:
    return tuple(r.var if k == axis else v for k, v in enumerate(i))


def _row_max(x: te.Tensor, axis: int) -> te.Tensor:
    """max along `axis`, kept as a size-1 dim."""
    shape = tuple(1 if k == axis else s for k, s in enumerate(x.shape))
    r = te.reduce_axis(x.shape[axis], "r")
    lowest = E.const(dt.min_value(x.dtype), x.dtype)
    return te.compute(shape, lambda *i: te.max_reduce(E.maximum(x[_at(i, axis, r)], lowest), r), name="softmax_max")


def _row_sum(v: te.Tensor, axis: int, name: str) -> te.Tensor:
    shape = tuple(1 if k == axis else s for k, s in enumerate(v.shape))
    r = te.reduce_axis(v.shape[axis], "r")
    return te.compute(shape, lambda *i: te.sum(v[_at(i, axis, r)], r), name=name)


def _collapsed(i: tuple[E.Var, ...], axis: int) -> tuple[E.PrimExpr, ...]:
    return tuple(E.IntImm(0) if k == axis else v for k, v in enumerate(i))


def _softmax_compute(inputs: list[te.Tensor], attrs: SoftmaxAttrs, out: TensorType,
                     sched: ScheduleContext) -> te.Tensor:
    """exp(x - max) is computed once into a buffer, summed, then scaled (one row kernel on AVX2 and up)."""
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    rows = softmax_rows(x, axis, out, sched)
    if rows is not None:
        return rows
    top = _row_max(x, axis)
    shifted = te.compute(
        x.shape, lambda *i: E.call(E.Intrinsic.EXP, [E.sub(x[i], top[_collapsed(i, axis)])], x.dtype),
        name="softmax_exp", materialize=True,
    )
    total = _row_sum(shifted, axis, "softmax_sum")
    return te.compute(x.shape, lambda *i: E.div(shifted[i], total[_collapsed(i, axis)]), name="softmax")


def _log_softmax_compute(inputs: list[te.Tensor], attrs: SoftmaxAttrs, out: TensorType,
                         sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    top = _row_max(x, axis)
    r = te.reduce_axis(x.shape[axis], "r")

    def exp_sum(*i: E.Var) -> E.PrimExpr:
        return te.sum(E.call(E.Intrinsic.EXP, [E.sub(x[_at(i, axis, r)], top[i])], x.dtype), r)

    total = te.compute(top.shape, exp_sum, name="softmax_sum")

    def element(*i: E.Var) -> E.PrimExpr:
        j = _collapsed(i, axis)
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


def _hardmax_compute(inputs: list[te.Tensor], attrs: SoftmaxAttrs, out: TensorType,
                     sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    shape = tuple(1 if k == axis else s for k, s in enumerate(x.shape))
    r = te.reduce_axis(x.shape[axis], "r")

    def first_max(*i: E.Var) -> E.PrimExpr:
        return te.argmax(x[tuple(r.var if k == axis else v for k, v in enumerate(i))], r)

    position = te.compute(shape, first_max, name="hardmax_argmax")

    def element(*i: E.Var) -> E.PrimExpr:
        j = _collapsed(i, axis)
        hit = E.eq(E.cast(i[axis], "int64"), position[j])
        return E.select(hit, E.const(1, x.dtype), E.const(0, x.dtype))

    return te.compute(x.shape, element, name="hardmax")


def _hardmax_ref(args: list[np.ndarray], attrs: SoftmaxAttrs) -> np.ndarray:
    x = args[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape([-1 if k == axis else 1 for k in range(x.ndim)])
    return (positions == first).astype(x.dtype)


hardmax = register_op("nn.hardmax", type_rel=_type, reference=_hardmax_ref, pattern=OpPattern.OPAQUE,
                      compute=_hardmax_compute, attrs=SoftmaxAttrs, num_inputs=1,
                      doc="1 at the first maximum along `axis`, 0 elsewhere.")
