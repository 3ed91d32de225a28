"""Data-movement operators: reshape, transpose, concatenate, slices, broadcasts.

All of them are injective (each output element reads one input element), so
they fuse into their neighbours and usually cost no kernel of their own.
Gathers, scatters, padding, scans and resampling live in `transform_*.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, broadcast_indices, normalize_axis, same_dtype, tensors
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


def unravel(flat: E.PrimExpr, shape: tuple[int, ...]) -> list[E.PrimExpr]:
    """Row-major indices of element `flat` in `shape`."""
    idx: list[E.PrimExpr] = []
    for k in range(len(shape) - 1, -1, -1):
        extent = shape[k]
        idx.append(E.floormod(flat, extent) if k else flat)
        flat = E.floordiv(flat, extent)
    idx.reverse()  # the outermost index took no modulo: flat < size
    return idx


def ravel(indices: tuple[E.PrimExpr, ...], shape: tuple[int, ...]) -> E.PrimExpr:
    flat: E.PrimExpr = E.IntImm(0)
    for i, extent in zip(indices, shape):
        flat = E.add(E.mul(flat, extent), i)
    return flat


# ----------------------------------------------------------------- reshape
@dataclass(frozen=True)
class ReshapeAttrs:
    newshape: tuple[int, ...]


def _reshape_type(types: tuple[Type, ...], attrs: ReshapeAttrs) -> Type:
    x = as_tensor(types[0])
    if any(s < 0 for s in attrs.newshape):
        raise TypeInferenceError(f"reshape target {attrs.newshape} must be fully specified")
    if math.prod(attrs.newshape) != x.size:
        raise TypeInferenceError(f"cannot reshape {x.shape} ({x.size} elements) to {attrs.newshape}")
    return TensorType(attrs.newshape, x.dtype)


def _reshape_compute(inputs: list[te.Tensor], attrs: ReshapeAttrs, out: TensorType,
                     sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    if x.shape == out.shape:
        return te.compute(out.shape, lambda *i: x[i], name="reshape")
    return te.compute(out.shape, lambda *i: x[tuple(unravel(ravel(i, out.shape), x.shape))], name="reshape")


reshape = register_op(
    "reshape", type_rel=_reshape_type, reference=lambda args, a: args[0].reshape(a.newshape),
    pattern=OpPattern.INJECTIVE, compute=_reshape_compute, attrs=ReshapeAttrs, num_inputs=1,
)


# --------------------------------------------------------------- transpose
@dataclass(frozen=True)
class TransposeAttrs:
    axes: tuple[int, ...]


def _transpose_type(types: tuple[Type, ...], attrs: TransposeAttrs) -> Type:
    x = as_tensor(types[0])
    if sorted(attrs.axes) != list(range(x.ndim)):
        raise TypeInferenceError(f"axes {attrs.axes} are not a permutation of {x.ndim} dims")
    return TensorType(tuple(x.shape[a] for a in attrs.axes), x.dtype)


def _transpose_compute(inputs: list[te.Tensor], attrs: TransposeAttrs, out: TensorType,
                       sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    inverse = np.argsort(attrs.axes)
    return te.compute(out.shape, lambda *i: x[tuple(i[int(k)] for k in inverse)], name="transpose")


transpose = register_op(
    "transpose", type_rel=_transpose_type,
    reference=lambda args, a: np.asarray(np.transpose(args[0], a.axes), order="C"),
    pattern=OpPattern.INJECTIVE, compute=_transpose_compute, attrs=TransposeAttrs, num_inputs=1,
)


# ------------------------------------------------------------- concatenate
@dataclass(frozen=True)
class ConcatAttrs:
    axis: int


def _concat_type(types: tuple[Type, ...], attrs: ConcatAttrs) -> Type:
    ts = tensors(types)
    if not ts:
        raise TypeInferenceError("concatenate needs at least one input")
    dtype = same_dtype(ts)
    nd = ts[0].ndim
    axis = normalize_axis(attrs.axis, nd)
    for t in ts:
        if t.ndim != nd or any(t.shape[k] != ts[0].shape[k] for k in range(nd) if k != axis):
            raise TypeInferenceError(
                f"shapes {[t.shape for t in ts]} differ outside axis {axis}"
            )
    shape = list(ts[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    return TensorType(tuple(shape), dtype)


def _concat_compute(inputs: list[te.Tensor], attrs: ConcatAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    axis = normalize_axis(attrs.axis, len(out.shape))
    offsets = [int(o) for o in np.cumsum([0] + [t.shape[axis] for t in inputs])]
    parts = [(t, offsets[k]) for k, t in enumerate(inputs) if t.shape[axis]]
    if not parts:  # every input is empty along `axis`: so is the output, nothing is read
        return te.compute(out.shape, lambda *i: E.const(0, out.dtype), name="concatenate")

    def read(t: te.Tensor, offset: int, i: tuple[E.Var, ...]) -> E.PrimExpr:
        # a select may evaluate both sides: keep every read inside its input
        pos = E.sub(i[axis], offset)
        if len(parts) > 1:
            pos = E.minimum(pos, t.shape[axis] - 1) if offset == 0 else \
                E.minimum(E.maximum(pos, 0), t.shape[axis] - 1)
        return t[i[:axis] + (pos,) + i[axis + 1:]]

    def element(*i: E.Var) -> E.PrimExpr:
        value = read(*parts[-1], i)
        for t, offset in reversed(parts[:-1]):
            value = E.select(E.lt(i[axis], offset + t.shape[axis]), read(t, offset, i), value)
        return value

    return te.compute(out.shape, element, name="concatenate")


concatenate = register_op(
    "concatenate", type_rel=_concat_type,
    reference=lambda args, a: np.concatenate(args, axis=a.axis),
    pattern=OpPattern.INJECTIVE, compute=_concat_compute, attrs=ConcatAttrs,
)


# ----------------------------------------------------------- strided_slice
@dataclass(frozen=True)
class StridedSliceAttrs:
    """Per-axis begin/end/stride with ONNX Slice semantics (see `slice_axis`)."""

    begin: tuple[int, ...]
    end: tuple[int, ...]
    strides: tuple[int, ...]


def slice_axis(begin: int, end: int, step: int, extent: int) -> tuple[int, int]:
    """(first index, length) of one axis of an ONNX Slice.

    Negative begin/end count from the end; then begin is clamped to
    [0, extent] (step > 0) or [0, extent - 1] (step < 0), and end to
    [0, extent] or [-1, extent - 1], as the ONNX specification says.
    """
    if step == 0:
        raise TypeInferenceError("slice step cannot be 0")
    begin = begin + extent if begin < 0 else begin
    end = end + extent if end < 0 else end
    if step > 0:
        begin, end = min(max(begin, 0), extent), min(max(end, 0), extent)
        return begin, max(0, -(-(end - begin) // step))
    begin, end = min(max(begin, 0), extent - 1), min(max(end, -1), extent - 1)
    return begin, max(0, -(-(begin - end) // -step))


def _slice_axes(x: TensorType, attrs: StridedSliceAttrs) -> list[tuple[int, int, int]]:
    """(first, length, step) per axis."""
    n = x.ndim
    if not len(attrs.begin) == len(attrs.end) == len(attrs.strides) == n:
        raise TypeInferenceError(
            f"strided_slice of a {n}-d tensor needs {n} begin/end/strides values, got "
            f"{len(attrs.begin)}/{len(attrs.end)}/{len(attrs.strides)}"
        )
    result = []
    for b, e, s, extent in zip(attrs.begin, attrs.end, attrs.strides, x.shape):
        first, length = slice_axis(b, e, s, extent)
        result.append((first, length, s))
    return result


def _strided_slice_type(types: tuple[Type, ...], attrs: StridedSliceAttrs) -> Type:
    x = as_tensor(types[0])
    return TensorType(tuple(length for _, length, _ in _slice_axes(x, attrs)), x.dtype)


def _strided_slice_ref(args: list[np.ndarray], attrs: StridedSliceAttrs) -> np.ndarray:
    x = args[0]
    for k, (first, length, step) in enumerate(_slice_axes(TensorType(x.shape, x.dtype.name), attrs)):
        x = np.take(x, first + step * np.arange(length, dtype=np.int64), axis=k)
    return np.ascontiguousarray(x)


def _strided_slice_compute(inputs: list[te.Tensor], attrs: StridedSliceAttrs, out: TensorType,
                           sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    axes = _slice_axes(TensorType(x.shape, x.dtype), attrs)
    return te.compute(
        out.shape, lambda *i: x[tuple(E.add(first, E.mul(step, v)) for v, (first, _, step) in zip(i, axes))],
        name="strided_slice",
    )


strided_slice = register_op(
    "strided_slice", type_rel=_strided_slice_type, reference=_strided_slice_ref,
    pattern=OpPattern.INJECTIVE, compute=_strided_slice_compute, attrs=StridedSliceAttrs, num_inputs=1,
)


# ------------------------------------------------------------ broadcast_to
@dataclass(frozen=True)
class BroadcastToAttrs:
    shape: tuple[int, ...]


def _broadcast_to_type(types: tuple[Type, ...], attrs: BroadcastToAttrs) -> Type:
    x = as_tensor(types[0])
    shape = tuple(attrs.shape)
    ok = len(shape) >= x.ndim and all(
        s in (1, t) for s, t in zip(x.shape, shape[len(shape) - x.ndim:])
    )
    if not ok:
        raise TypeInferenceError(f"cannot broadcast shape {x.shape} to {shape}")
    return TensorType(shape, x.dtype)


def _broadcast_to_compute(inputs: list[te.Tensor], attrs: BroadcastToAttrs, out: TensorType,
                          sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    return te.compute(out.shape, lambda *i: x[broadcast_indices(i, x.shape)], name="broadcast_to")


broadcast_to = register_op(
    "broadcast_to", type_rel=_broadcast_to_type,
    reference=lambda args, a: np.asarray(np.broadcast_to(args[0], a.shape), order="C"),
    pattern=OpPattern.BROADCAST, compute=_broadcast_to_compute, attrs=BroadcastToAttrs, num_inputs=1,
)


# -------------------------------------------------------------------- tile
@dataclass(frozen=True)
class TileAttrs:
    reps: tuple[int, ...]


def _tile_type(types: tuple[Type, ...], attrs: TileAttrs) -> Type:
    x = as_tensor(types[0])
    if len(attrs.reps) != x.ndim or any(r < 0 for r in attrs.reps):
        raise TypeInferenceError(
            f"tile of a {x.ndim}-d tensor needs {x.ndim} non-negative repeats, got {attrs.reps}"
        )
    return TensorType(tuple(s * r for s, r in zip(x.shape, attrs.reps)), x.dtype)


def _tile_compute(inputs: list[te.Tensor], attrs: TileAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    return te.compute(out.shape, lambda *i: x[tuple(E.floormod(v, max(n, 1)) for v, n in zip(i, x.shape))],
                      name="tile")


tile = register_op(
    "tile", type_rel=_tile_type, reference=lambda args, a: np.tile(args[0], a.reps),
    pattern=OpPattern.INJECTIVE, compute=_tile_compute, attrs=TileAttrs, num_inputs=1,
)
