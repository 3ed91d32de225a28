"""Gathers: operators that read their input at positions held in a tensor.

Indices are run-time data. As in ONNX, an index of an axis of size n lies in
[-n, n - 1], and a negative one counts from the end. Any other index is an
error: indices known at compile time are refused then (`validate`, which
the NumPy references call too), and a kernel tests its run-time indices
before it computes (a `te.Check` per index, not per output element) and
returns TS_ERROR_INDEX_OUT_OF_RANGE, which the executors report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from .. import te
from ..crt.status import Status
from ..errors import InvalidValueError, TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, normalize_axis
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


# ------------------------------------------------------------------ helpers
def check_indices(t: TensorType, what: str = "indices") -> None:
    if not dt.is_int(t.dtype):
        raise TypeInferenceError(f"{what} must have an integer dtype, got {t.dtype}")


def index_in_range(value: E.PrimExpr, extent: int) -> E.PrimExpr:
    """`-extent <= value < extent`, compared in a type that holds both sides."""
    if dt.is_unsigned(value.dtype):
        return E.lt(E.cast(value, "uint64"), E.const(extent, "uint64"))
    d = "int32" if value.dtype == "int32" and extent <= dt.max_value("int32") else "int64"
    value = E.cast(value, d) if value.dtype != d else value
    return E.logical_and(E.ge(value, E.const(-extent, d)), E.lt(value, E.const(extent, d)))


def index_check(indices: te.Tensor, extent: int) -> te.Check:
    """The kernel's test that every element of `indices` indexes an axis of `extent`."""
    return te.check(indices.shape, lambda *i: index_in_range(indices[i], extent), Status.INDEX_OUT_OF_RANGE)


def wrap_index(value: E.PrimExpr, extent: int) -> E.PrimExpr:
    """A checked run-time index (see `index_check`) as a position: negatives count from the end."""
    if value.dtype not in ("int32", "int64"):
        value = E.cast(value, "int64")  # room for `extent`, whatever the index type
    zero = E.const(0, value.dtype)
    value = E.add(value, E.select(E.lt(value, zero), E.const(extent, value.dtype), zero))
    return E.cast(value, "int32")


def check_index_values(indices: np.ndarray, extent: int, axis: int) -> None:
    """Refuse an index outside [-extent, extent - 1], naming it and the valid range."""
    idx = np.asarray(indices)
    wide = idx.astype(np.float64)  # compares every integer dtype with negative bounds
    bad = (wide < -extent) | (wide >= extent)
    if bad.any():
        raise InvalidValueError(
            f"index {idx[bad].flat[0]} is out of range for axis {axis} of size {extent} "
            f"(valid: {-extent}..{extent - 1})"
        )


def wrap_index_np(indices: np.ndarray, extent: int) -> np.ndarray:
    """NumPy twin of `wrap_index` (for indices `check_index_values` accepted)."""
    idx = np.asarray(indices).astype(np.int64)
    return np.where(idx < 0, idx + extent, idx)


# --------------------------------------------------------------------- take
@dataclass(frozen=True)
class TakeAttrs:
    axis: int = 0


def _take_type(types: tuple[Type, ...], attrs: TakeAttrs) -> Type:
    x, idx = as_tensor(types[0], "data"), as_tensor(types[1], "indices")
    check_indices(idx)
    if x.ndim == 0:
        raise TypeInferenceError("take needs data of rank >= 1, got a scalar")
    axis = normalize_axis(attrs.axis, x.ndim)
    if x.shape[axis] == 0 and idx.size:
        raise TypeInferenceError(f"cannot take {idx.size} elements from an empty axis {axis} of {x.shape}")
    return TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def _axis_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None], axis_attr: int) -> None:
    """Indices (input 1) along `axis_attr` of the data (input 0), where known."""
    if values[1] is not None:
        axis = normalize_axis(axis_attr, len(shapes[0]))
        check_index_values(values[1], shapes[0][axis], axis)


def _take_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None], attrs: TakeAttrs) -> None:
    _axis_values(shapes, values, attrs.axis)


def _take_ref(args: list[np.ndarray], attrs: TakeAttrs) -> np.ndarray:
    x, idx = args
    _take_values([x.shape, idx.shape], [x, idx], attrs)
    axis = normalize_axis(attrs.axis, x.ndim)
    return np.take(x, wrap_index_np(idx, x.shape[axis]), axis=axis)


def _take_compute(inputs: list[te.Tensor], attrs: TakeAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x, idx = inputs
    axis = normalize_axis(attrs.axis, x.ndim)
    m = idx.ndim

    def element(*i: E.Var) -> E.PrimExpr:
        pos = wrap_index(idx[i[axis:axis + m]], x.shape[axis])
        return x[i[:axis] + (pos,) + i[axis + m:]]

    return te.compute(out.shape, element, name="take", checks=(index_check(idx, x.shape[axis]),))


take = register_op(
    "take", type_rel=_take_type, reference=_take_ref, pattern=OpPattern.INJECTIVE,
    compute=_take_compute, attrs=TakeAttrs, num_inputs=2, validate=_take_values,
    doc="Gather slices along `axis` (ONNX Gather); a 0-d index removes the axis.",
)


# ----------------------------------------------------------- gather_elements
@dataclass(frozen=True)
class GatherElementsAttrs:
    axis: int = 0


def _gather_elements_type(types: tuple[Type, ...], attrs: GatherElementsAttrs) -> Type:
    x, idx = as_tensor(types[0], "data"), as_tensor(types[1], "indices")
    check_indices(idx)
    if idx.ndim != x.ndim or x.ndim == 0:
        raise TypeInferenceError(f"indices must have the rank of data ({x.ndim} >= 1), got shape {idx.shape}")
    axis = normalize_axis(attrs.axis, x.ndim)
    for k, (n, m) in enumerate(zip(x.shape, idx.shape)):
        if k != axis and m > n:
            raise TypeInferenceError(f"indices shape {idx.shape} exceeds data shape {x.shape} on axis {k}")
    if x.shape[axis] == 0 and idx.size:
        raise TypeInferenceError(f"cannot gather from an empty axis {axis} of {x.shape}")
    return TensorType(idx.shape, x.dtype)


def _gather_elements_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None],
                            attrs: GatherElementsAttrs) -> None:
    _axis_values(shapes, values, attrs.axis)


def _gather_elements_ref(args: list[np.ndarray], attrs: GatherElementsAttrs) -> np.ndarray:
    x, idx = args
    _gather_elements_values([x.shape, idx.shape], [x, idx], attrs)
    axis = normalize_axis(attrs.axis, x.ndim)
    grid: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
    grid[axis] = wrap_index_np(idx, x.shape[axis])
    return x[tuple(grid)]


def _gather_elements_compute(inputs: list[te.Tensor], attrs: GatherElementsAttrs, out: TensorType,
                             sched: ScheduleContext) -> te.Tensor:
    x, idx = inputs
    axis = normalize_axis(attrs.axis, x.ndim)

    def element(*i: E.Var) -> E.PrimExpr:
        pos = wrap_index(idx[i], x.shape[axis])
        return x[i[:axis] + (pos,) + i[axis + 1:]]

    return te.compute(out.shape, element, name="gather_elements", checks=(index_check(idx, x.shape[axis]),))


gather_elements = register_op(
    "gather_elements", type_rel=_gather_elements_type, reference=_gather_elements_ref,
    pattern=OpPattern.INJECTIVE, compute=_gather_elements_compute, attrs=GatherElementsAttrs, num_inputs=2,
    validate=_gather_elements_values,
)


# ---------------------------------------------------------------- gather_nd
@dataclass(frozen=True)
class GatherNDAttrs:
    batch_dims: int = 0


def _gather_nd_dims(x: TensorType, idx: TensorType, b: int) -> int:
    """Checks shapes; returns q, the length of one index tuple."""
    check_indices(idx)
    if idx.ndim < 1:
        raise TypeInferenceError("gather_nd indices need at least 1 dimension")
    q = idx.shape[-1]
    if not 0 <= b < min(x.ndim, idx.ndim):
        raise TypeInferenceError(f"batch_dims {b} out of range for data {x.shape} and indices {idx.shape}")
    if not 1 <= q <= x.ndim - b:
        raise TypeInferenceError(f"index tuples of length {q} do not fit data {x.shape} with batch_dims {b}")
    if x.shape[:b] != idx.shape[:b]:
        raise TypeInferenceError(f"batch dims of data {x.shape} and indices {idx.shape} differ")
    return q


def _gather_nd_type(types: tuple[Type, ...], attrs: GatherNDAttrs) -> Type:
    x, idx = as_tensor(types[0], "data"), as_tensor(types[1], "indices")
    q = _gather_nd_dims(x, idx, attrs.batch_dims)
    return TensorType(idx.shape[:-1] + x.shape[attrs.batch_dims + q:], x.dtype)


def tuple_check(indices: te.Tensor, extents: tuple[int, ...]) -> te.Check:
    """Index tuples (the last axis of `indices`): component k indexes an axis of `extents[k]`."""

    def cond(*i: E.Var) -> E.PrimExpr:
        ok = index_in_range(indices[i + (0,)], extents[0])
        for k in range(1, len(extents)):
            ok = E.logical_and(ok, index_in_range(indices[i + (k,)], extents[k]))
        return ok

    return te.check(indices.shape[:-1], cond, Status.INDEX_OUT_OF_RANGE)


def check_tuple_values(indices: np.ndarray | None, extents: tuple[int, ...], first_axis: int) -> None:
    if indices is not None:
        for k, extent in enumerate(extents):
            check_index_values(np.asarray(indices)[..., k], extent, first_axis + k)


def _gather_nd_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None], attrs: GatherNDAttrs) -> None:
    b, q = attrs.batch_dims, shapes[1][-1]
    check_tuple_values(values[1], shapes[0][b:b + q], b)


def _gather_nd_ref(args: list[np.ndarray], attrs: GatherNDAttrs) -> np.ndarray:
    x, idx = args
    _gather_nd_values([x.shape, idx.shape], [x, idx], attrs)
    b, q = attrs.batch_dims, idx.shape[-1]
    out = np.empty(idx.shape[:-1] + x.shape[b + q:], dtype=x.dtype)
    for pos in np.ndindex(idx.shape[:-1]):
        tup = tuple(int(wrap_index_np(v, x.shape[b + k])) for k, v in enumerate(idx[pos]))
        out[pos] = x[pos[:b] + tup]
    return out


def _gather_nd_compute(inputs: list[te.Tensor], attrs: GatherNDAttrs, out: TensorType,
                       sched: ScheduleContext) -> te.Tensor:
    x, idx = inputs
    b, q = attrs.batch_dims, idx.shape[-1]
    m = idx.ndim - 1  # output dims that come from the indices

    def element(*i: E.Var) -> E.PrimExpr:
        tup = tuple(wrap_index(idx[i[:m] + (k,)], x.shape[b + k]) for k in range(q))
        return x[i[:b] + tup + i[m:]]

    return te.compute(out.shape, element, name="gather_nd", checks=(tuple_check(idx, x.shape[b:b + q]),))


gather_nd = register_op(
    "gather_nd", type_rel=_gather_nd_type, reference=_gather_nd_ref, pattern=OpPattern.INJECTIVE,
    compute=_gather_nd_compute, attrs=GatherNDAttrs, num_inputs=2, validate=_gather_nd_values,
)


# --------------------------------------------------------- reverse_sequence
@dataclass(frozen=True)
class ReverseSequenceAttrs:
    time_axis: int = 0
    batch_axis: int = 1


def _reverse_sequence_axes(x: TensorType, attrs: ReverseSequenceAttrs) -> tuple[int, int]:
    t = normalize_axis(attrs.time_axis, x.ndim, "time_axis")
    b = normalize_axis(attrs.batch_axis, x.ndim, "batch_axis")
    if t == b:
        raise TypeInferenceError(f"time_axis and batch_axis must differ, both are {t}")
    return t, b


def _reverse_sequence_type(types: tuple[Type, ...], attrs: ReverseSequenceAttrs) -> Type:
    x, lens = as_tensor(types[0], "data"), as_tensor(types[1], "sequence_lens")
    check_indices(lens, "sequence_lens")
    _, b = _reverse_sequence_axes(x, attrs)
    if lens.shape != (x.shape[b],):
        raise TypeInferenceError(f"sequence_lens must have shape ({x.shape[b]},), got {lens.shape}")
    return x


def _reverse_sequence_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None],
                             attrs: ReverseSequenceAttrs) -> None:
    """A sequence length lies in [0, steps] (onnxruntime refuses others)."""
    lens = values[1]
    if lens is None:
        return
    t, _ = _reverse_sequence_axes(TensorType(shapes[0], "float32"), attrs)
    wide = np.asarray(lens).astype(np.float64)
    bad = (wide < 0) | (wide > shapes[0][t])
    if bad.any():
        raise InvalidValueError(f"sequence length {np.asarray(lens)[bad].flat[0]} is out of range for time axis "
                                f"{t} of size {shapes[0][t]} (valid: 0..{shapes[0][t]})")


def _reverse_sequence_ref(args: list[np.ndarray], attrs: ReverseSequenceAttrs) -> np.ndarray:
    x, lens = args
    _reverse_sequence_values([x.shape, lens.shape], [x, lens], attrs)
    t, b = _reverse_sequence_axes(TensorType(x.shape, x.dtype.name), attrs)
    out = x.copy()
    for k, n in enumerate(lens.astype(np.int64)):
        src: list[slice | int] = [slice(None)] * x.ndim
        src[b], src[t] = k, slice(0, n)
        dst = list(src)
        dst[t] = slice(n - 1, None, -1) if n else slice(0, 0)
        out[tuple(dst)] = x[tuple(src)]
    return out


def _reverse_sequence_compute(inputs: list[te.Tensor], attrs: ReverseSequenceAttrs, out: TensorType,
                              sched: ScheduleContext) -> te.Tensor:
    x, lens = inputs
    t, b = _reverse_sequence_axes(TensorType(x.shape, x.dtype), attrs)
    steps = x.shape[t]

    def length_in_range(k: E.Var) -> E.PrimExpr:
        n = E.cast(lens[(k,)], "int64")
        return E.logical_and(E.ge(n, E.const(0, "int64")), E.le(n, E.const(steps, "int64")))

    def element(*i: E.Var) -> E.PrimExpr:
        n = E.cast(lens[(i[b],)], "int32")  # checked: 0 <= n <= steps
        src = E.select(E.lt(i[t], n), E.sub(E.sub(n, 1), i[t]), i[t])
        return x[i[:t] + (src,) + i[t + 1:]]

    ok = te.check(lens.shape, length_in_range, Status.INDEX_OUT_OF_RANGE)
    return te.compute(out.shape, element, name="reverse_sequence", checks=(ok,))


reverse_sequence = register_op(
    "reverse_sequence", type_rel=_reverse_sequence_type, reference=_reverse_sequence_ref,
    pattern=OpPattern.INJECTIVE, compute=_reverse_sequence_compute, attrs=ReverseSequenceAttrs, num_inputs=2,
    validate=_reverse_sequence_values,
)
