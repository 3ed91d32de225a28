"""Scatters: copies of `data` with elements replaced (or combined) by `updates`.

Loops cannot write to data-dependent positions in tessera's tensor
expressions, so each output element searches the updates that may land on
it: along the scatter axis for scatter_elements (cost O(out * K)), over all
index tuples for scatter_nd (O(out * J * q)). Without a reduction the last
matching update wins, as in the sequential ONNX definition; with one, the
data element is combined with the matching updates in index order, so
floating-point sums round exactly like the reference loop. Indices follow
ONNX: in [-n, n - 1] for an axis of size n, negatives counting from the end;
others are refused at compile time or make the kernel return
TS_ERROR_INDEX_OUT_OF_RANGE (see transform_gather).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, normalize_axis
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext
from .transform import unravel
from .transform_gather import (
    check_index_values,
    check_indices,
    check_tuple_values,
    index_check,
    tuple_check,
    wrap_index,
    wrap_index_np,
)

REDUCTIONS = ("none", "add", "mul", "max", "min")

# reduction -> (TE reducer, identity element, NumPy combiner)
_REDUCERS: dict[str, tuple[Callable[[E.PrimExpr, te.IterVar], te.Reduce], Callable[[str], int | float],
                           Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "add": (te.sum, lambda d: 0, np.add),
    "mul": (te.prod, lambda d: 1, np.multiply),
    "max": (te.max_reduce, dt.min_value, np.maximum),
    "min": (te.min_reduce, dt.max_value, np.minimum),
}

Match = Callable[[tuple[E.Var, ...], E.PrimExpr], E.PrimExpr]  # (out index, update number) -> bool
Read = Callable[[tuple[E.Var, ...], E.PrimExpr], E.PrimExpr]  # (out index, update number) -> value


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise TypeInferenceError(f"reduction {reduction!r} is not valid; expected one of {', '.join(REDUCTIONS)}")


def _check_updates(data: TensorType, updates: TensorType, shape: tuple[int, ...]) -> None:
    if updates.dtype != data.dtype:
        raise TypeInferenceError(f"updates dtype {updates.dtype} differs from data dtype {data.dtype}")
    if updates.shape != shape:
        raise TypeInferenceError(f"updates must have shape {shape}, got {updates.shape}")


def _scatter(data: te.Tensor, count: int, match: Match, read: Read, reduction: str, name: str,
             ok: te.Check) -> te.Tensor:
    """out[i] = data[i] combined with read(i, j) for every update j < count that matches i;
    `ok` checks the indices before any of it."""
    if count == 0:
        return te.compute(data.shape, lambda *i: data[i], name=name)
    if reduction == "none":
        k = te.reduce_axis(count, "j")
        last = te.compute(
            data.shape, lambda *i: te.max_reduce(E.select(match(i, k.var), k.var, -1), k), name=f"{name}_last",
            checks=(ok,),
        )
        return te.compute(
            data.shape,
            lambda *i: E.select(E.ge(last[i], 0), read(i, E.maximum(last[i], 0)), data[i]),
            name=name,
        )
    reducer, identity, _ = _REDUCERS[reduction]
    k = te.reduce_axis(count + 1, "j")  # j = 0 is data[i] itself: it is combined first

    def element(*i: E.Var) -> te.Reduce:
        j = E.sub(k.var, 1)
        update = E.select(match(i, j), read(i, E.maximum(j, 0)), E.const(identity(data.dtype), data.dtype))
        return reducer(E.select(E.eq(k.var, 0), data[i], update), k)

    return te.compute(data.shape, element, name=name, checks=(ok,))


def _combine_np(reduction: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    if reduction == "none":
        return lambda old, new: new
    return _REDUCERS[reduction][2]


# --------------------------------------------------------- scatter_elements
@dataclass(frozen=True)
class ScatterElementsAttrs:
    axis: int = 0
    reduction: str = "none"


def _scatter_elements_type(types: tuple[Type, ...], attrs: ScatterElementsAttrs) -> Type:
    data, idx, upd = (as_tensor(t, w) for t, w in zip(types, ("data", "indices", "updates")))
    check_indices(idx)
    _check_reduction(attrs.reduction)
    if idx.ndim != data.ndim or data.ndim == 0:
        raise TypeInferenceError(f"indices must have the rank of data ({data.ndim} >= 1), got shape {idx.shape}")
    axis = normalize_axis(attrs.axis, data.ndim)
    for k, (n, m) in enumerate(zip(data.shape, idx.shape)):
        if k != axis and m > n:
            raise TypeInferenceError(f"indices shape {idx.shape} exceeds data shape {data.shape} on axis {k}")
    _check_updates(data, upd, idx.shape)
    return data


def _scatter_elements_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None],
                             attrs: ScatterElementsAttrs) -> None:
    if values[1] is not None:
        axis = normalize_axis(attrs.axis, len(shapes[0]))
        check_index_values(values[1], shapes[0][axis], axis)


def _scatter_elements_ref(args: list[np.ndarray], attrs: ScatterElementsAttrs) -> np.ndarray:
    data, idx, upd = args
    _scatter_elements_values([a.shape for a in args], list(args), attrs)
    axis = normalize_axis(attrs.axis, data.ndim)
    combine = _combine_np(attrs.reduction)
    out = data.copy()
    wrapped = wrap_index_np(idx, data.shape[axis])
    for pos in np.ndindex(idx.shape):
        target = pos[:axis] + (int(wrapped[pos]),) + pos[axis + 1:]
        out[target] = combine(out[target], upd[pos])
    return out


def _scatter_elements_compute(inputs: list[te.Tensor], attrs: ScatterElementsAttrs, out: TensorType,
                              sched: ScheduleContext) -> te.Tensor:
    data, idx, upd = inputs
    axis = normalize_axis(attrs.axis, data.ndim)

    def source(i: tuple[E.Var, ...], k: E.PrimExpr) -> tuple[E.PrimExpr, ...]:
        """Index of update k on the line of output element i (clamped; see `covered`)."""
        pos = [E.minimum(v, m - 1) if m < n else v for v, m, n in zip(i, idx.shape, data.shape)]
        pos[axis] = k
        return tuple(pos)

    def covered(i: tuple[E.Var, ...]) -> E.PrimExpr:
        """Does the indices tensor have a line through output element i?"""
        cond: E.PrimExpr = E.IntImm(1, "bool")
        for d, (v, m, n) in enumerate(zip(i, idx.shape, data.shape)):
            if d != axis and m < n:
                cond = E.logical_and(cond, E.lt(v, m))
        return cond

    def match(i: tuple[E.Var, ...], k: E.PrimExpr) -> E.PrimExpr:
        return E.logical_and(covered(i), E.eq(wrap_index(idx[source(i, k)], data.shape[axis]), i[axis]))

    return _scatter(data, idx.shape[axis], match, lambda i, k: upd[source(i, k)], attrs.reduction,
                    "scatter_elements", index_check(idx, data.shape[axis]))


scatter_elements = register_op(
    "scatter_elements", type_rel=_scatter_elements_type, reference=_scatter_elements_ref,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=_scatter_elements_compute, attrs=ScatterElementsAttrs,
    num_inputs=3, validate=_scatter_elements_values,
)


# --------------------------------------------------------------- scatter_nd
@dataclass(frozen=True)
class ScatterNDAttrs:
    reduction: str = "none"


def _scatter_nd_type(types: tuple[Type, ...], attrs: ScatterNDAttrs) -> Type:
    data, idx, upd = (as_tensor(t, w) for t, w in zip(types, ("data", "indices", "updates")))
    check_indices(idx)
    _check_reduction(attrs.reduction)
    if idx.ndim < 1 or not 1 <= idx.shape[-1] <= data.ndim:
        raise TypeInferenceError(
            f"indices of shape {idx.shape} must end in a tuple length between 1 and {data.ndim}"
        )
    _check_updates(data, upd, idx.shape[:-1] + data.shape[idx.shape[-1]:])
    return data


def _scatter_nd_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None],
                       attrs: ScatterNDAttrs) -> None:
    check_tuple_values(values[1], shapes[0][:shapes[1][-1]], 0)


def _scatter_nd_ref(args: list[np.ndarray], attrs: ScatterNDAttrs) -> np.ndarray:
    data, idx, upd = args
    _scatter_nd_values([a.shape for a in args], list(args), attrs)
    combine = _combine_np(attrs.reduction)
    out = data.copy()
    for pos in np.ndindex(idx.shape[:-1]):
        target = tuple(int(wrap_index_np(v, data.shape[k])) for k, v in enumerate(idx[pos]))
        out[target] = combine(out[target], upd[pos])
    return out


def _scatter_nd_compute(inputs: list[te.Tensor], attrs: ScatterNDAttrs, out: TensorType,
                        sched: ScheduleContext) -> te.Tensor:
    data, idx, upd = inputs
    prefix, q = idx.shape[:-1], idx.shape[-1]

    def match(i: tuple[E.Var, ...], j: E.PrimExpr) -> E.PrimExpr:
        pos = tuple(unravel(E.maximum(j, 0), prefix))
        cond: E.PrimExpr = E.IntImm(1, "bool")
        for k in range(q):
            cond = E.logical_and(cond, E.eq(wrap_index(idx[pos + (k,)], data.shape[k]), i[k]))
        return cond

    def read(i: tuple[E.Var, ...], j: E.PrimExpr) -> E.PrimExpr:
        return upd[tuple(unravel(j, prefix)) + tuple(i[q:])]

    return _scatter(data, math.prod(prefix), match, read, attrs.reduction, "scatter_nd",
                    tuple_check(idx, data.shape[:q]))


scatter_nd = register_op(
    "scatter_nd", type_rel=_scatter_nd_type, reference=_scatter_nd_ref,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=_scatter_nd_compute, attrs=ScatterNDAttrs, num_inputs=3,
    validate=_scatter_nd_values,
)
