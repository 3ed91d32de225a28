"""Reductions over a set of axes: sum, mean, max, min, prod, argmax, argmin."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, TupleType, Type
from ..tir import expr as E
from ._util import as_tensor, normalize_axis
from .registry import Op, OpPattern, register_op
from .row_means import row_means
from .schedule_context import ScheduleContext


@dataclass(frozen=True)
class ReduceAttrs:
    axes: tuple[int, ...]  # empty: all axes
    keepdims: bool = False


@dataclass(frozen=True)
class ArgReduceAttrs:
    axis: int
    keepdims: bool = True
    select_last_index: bool = False


def reduced_axes(ndim: int, axes: tuple[int, ...]) -> tuple[int, ...]:
    if not axes:
        return tuple(range(ndim))
    norm = tuple(sorted({normalize_axis(a, ndim) for a in axes}))
    return norm


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if k in axes else s for k, s in enumerate(shape))
    return tuple(s for k, s in enumerate(shape) if k not in axes)


def _reduce_type(types: tuple[Type, ...], attrs: ReduceAttrs) -> Type:
    x = as_tensor(types[0])
    axes = reduced_axes(x.ndim, attrs.axes)
    return TensorType(reduced_shape(x.shape, axes, attrs.keepdims), x.dtype)


def _reduce_compute(combine: Callable[..., te.Reduce], name: str):
    def compute(inputs: list[te.Tensor], attrs: ReduceAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
        x = inputs[0]
        axes = reduced_axes(x.ndim, attrs.axes)
        raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}

        def element(*i: E.Var) -> E.PrimExpr:
            idx, pos = [], 0
            for k in range(x.ndim):
                if k in raxes:
                    idx.append(raxes[k].var)
                    if attrs.keepdims:
                        pos += 1
                else:
                    idx.append(i[pos])
                    pos += 1
            return combine(x[tuple(idx)], list(raxes.values()))

        return te.compute(out.shape, element, name=name)

    return compute


def _mean_compute(inputs: list[te.Tensor], attrs: ReduceAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    axes = reduced_axes(x.ndim, attrs.axes)
    if axes == tuple(range(x.ndim - len(axes), x.ndim)):  # trailing axes: contiguous runs (a global pool)
        run = math.prod(x.shape[a] for a in axes)
        means = row_means(x, math.prod(out.shape), run, run, tuple(out.shape), sched)
        if means is not None:
            return means
    total = _reduce_compute(te.sum, "mean_sum")(inputs, attrs, out, sched)
    count = math.prod(x.shape[a] for a in axes)
    return te.compute(out.shape, lambda *i: E.div(total[i], E.const(count, x.dtype)), name="mean")


def _np_reduce(fn: Callable[..., np.ndarray]):
    def ref(args: list[np.ndarray], attrs: ReduceAttrs) -> np.ndarray:
        x = args[0]
        axes = reduced_axes(x.ndim, attrs.axes)
        return np.asarray(fn(x, axis=axes, keepdims=attrs.keepdims)).astype(x.dtype)

    return ref


def _register(name: str, compute, reference) -> Op:
    return register_op(name, type_rel=_reduce_type, reference=reference, pattern=OpPattern.COMM_REDUCE,
                       compute=compute, attrs=ReduceAttrs, num_inputs=1)


sum = _register("sum", _reduce_compute(te.sum, "sum"), _np_reduce(np.sum))  # noqa: A001
prod = _register("prod", _reduce_compute(te.prod, "prod"), _np_reduce(np.prod))
max = _register("max", _reduce_compute(te.max_reduce, "max"), _np_reduce(np.max))  # noqa: A001
min = _register("min", _reduce_compute(te.min_reduce, "min"), _np_reduce(np.min))  # noqa: A001
mean = _register("mean", _mean_compute, _np_reduce(np.mean))


def _arg_type(types: tuple[Type, ...], attrs: ArgReduceAttrs) -> Type:
    x = as_tensor(types[0])
    axis = normalize_axis(attrs.axis, x.ndim)
    if x.shape[axis] == 0:
        raise TypeInferenceError("cannot take argmax/argmin over an empty axis")
    return TensorType(reduced_shape(x.shape, (axis,), attrs.keepdims), "int64")


def _arg_compute(maximum: bool):
    def compute(inputs: list[te.Tensor], attrs: ArgReduceAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
        x = inputs[0]
        axis = normalize_axis(attrs.axis, x.ndim)
        r = te.reduce_axis(x.shape[axis], "r")

        def element(*i: E.Var) -> E.PrimExpr:
            idx = list(i)
            if attrs.keepdims:
                idx[axis] = r.var
            else:
                idx.insert(axis, r.var)
            fn = te.argmax if maximum else te.argmin
            return fn(x[tuple(idx)], r, attrs.select_last_index)

        return te.compute(out.shape, element, name="argmax" if maximum else "argmin")

    return compute


def _arg_ref(maximum: bool):
    def ref(args: list[np.ndarray], attrs: ArgReduceAttrs) -> np.ndarray:
        x = args[0]
        axis = normalize_axis(attrs.axis, x.ndim)
        fn = np.argmax if maximum else np.argmin
        if attrs.select_last_index:
            flipped = np.flip(x, axis)
            result = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            result = fn(x, axis=axis)
        if attrs.keepdims:
            result = np.expand_dims(result, axis)
        return result.astype(np.int64)

    return ref


argmax = register_op("argmax", type_rel=_arg_type, reference=_arg_ref(True), pattern=OpPattern.COMM_REDUCE,
                     compute=_arg_compute(True), attrs=ArgReduceAttrs, num_inputs=1)
argmin = register_op("argmin", type_rel=_arg_type, reference=_arg_ref(False), pattern=OpPattern.COMM_REDUCE,
                     compute=_arg_compute(False), attrs=ArgReduceAttrs, num_inputs=1)


# ------------------------------------------------------------------ top-k
@dataclass(frozen=True)
class TopKAttrs:
    k: int
    axis: int = -1
    largest: bool = True


def _topk_type(types: tuple[Type, ...], attrs: TopKAttrs) -> Type:
    x = as_tensor(types[0])
    axis = normalize_axis(attrs.axis, x.ndim)
    if not 1 <= attrs.k <= x.shape[axis]:
        raise TypeInferenceError(f"topk k={attrs.k} must be in 1..{x.shape[axis]} (the size of axis {axis})")
    shape = tuple(attrs.k if a == axis else s for a, s in enumerate(x.shape))
    return TupleType((TensorType(shape, x.dtype), TensorType(shape, "int64")))


def _topk_compute(inputs: list[te.Tensor], attrs: TopKAttrs, out: TupleType,
                  sched: ScheduleContext) -> tuple[te.Tensor, te.Tensor]:
    """rank[i] = elements ordered before element i (ties: lower index first);
    the j-th result is the element of rank j."""
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    r = te.reduce_axis(x.shape[axis], "r")
    before = E.gt if attrs.largest else E.lt

    def at(i: tuple[E.PrimExpr, ...], pos: E.PrimExpr) -> tuple[E.PrimExpr, ...]:
        return tuple(pos if a == axis else v for a, v in enumerate(i))

    def rank_of(*i: E.Var) -> E.PrimExpr:
        other, mine = x[at(i, r.var)], x[i]
        ahead = E.logical_or(before(other, mine), E.logical_and(E.eq(other, mine), E.lt(r.var, i[axis])))
        return te.sum(E.cast(ahead, "int32"), r)

    rank = te.compute(x.shape, rank_of, name="topk_rank")
    s = te.reduce_axis(x.shape[axis], "s")
    shape = as_tensor(out.fields[0], "topk values").shape

    def index_of(*j: E.Var) -> E.PrimExpr:
        # exactly one element has rank j: summing its position is exact (and,
        # unlike an argmax over the match flags, gcc 12 -O3 -mavx2 compiles it right)
        hit = E.eq(rank[at(j, s.var)], j[axis])
        return te.sum(E.select(hit, E.cast(s.var, "int64"), E.const(0, "int64")), s)

    indices = te.compute(shape, index_of, name="topk_indices")
    values = te.compute(shape, lambda *j: x[at(j, E.cast(indices[j], "int32"))], name="topk_values")
    return values, indices


def _topk_ref(args: list[np.ndarray], attrs: TopKAttrs) -> tuple[np.ndarray, np.ndarray]:
    x = args[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    if attrs.largest:  # descending values, ties in ascending index order
        flipped = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = np.flip(x.shape[axis] - 1 - flipped, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    order = np.take(order, np.arange(attrs.k), axis=axis)
    return np.take_along_axis(x, order, axis=axis), order.astype(np.int64)


topk = register_op("topk", type_rel=_topk_type, reference=_topk_ref, pattern=OpPattern.OPAQUE,
                   compute=_topk_compute, attrs=TopKAttrs, num_inputs=1,
                   doc="The k largest (or smallest) elements along `axis`, sorted, and their indices.")
