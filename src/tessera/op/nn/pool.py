"""N-d max, average and Lp pooling (NC[D]HW); global pooling is `mean`/`max`.

Padding is folded into the reads (a select against the border), and the
average's divisor is computed per output position in closed form, so both
ONNX `count_include_pad` modes and `ceil_mode` windows are exact. Lp pooling
is `(sum |x|^p) ^ (1/p)` over the window, padding contributing zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import dtype as dt
from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...tir import expr as E
from .._util import as_tensor
from ..registry import Op, OpPattern, register_op
from ..row_means import row_means
from ..schedule_context import ScheduleContext
from .conv_schedule import pad_input
from .pool_rows import pool2d_call
from ..transform import unravel


@dataclass(frozen=True)
class PoolAttrs:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[int, ...]  # begins, then ends
    dilation: tuple[int, ...]
    ceil_mode: bool = False
    count_include_pad: bool = False  # average pooling only
    p: float = 2.0  # Lp pooling only


def pool_output_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool) -> int:
    span = size + pb + pe - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    # a window may not start in the end padding (ONNX and PyTorch agree)
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def _out_spatial(shape: tuple[int, ...], a: PoolAttrs) -> list[int]:
    d = len(a.kernel)
    return [
        pool_output_size(shape[2 + k], a.kernel[k], a.strides[k], a.dilation[k], a.padding[k],
                         a.padding[d + k], a.ceil_mode)
        for k in range(d)
    ]


def pool_type(types: tuple[Type, ...], attrs: PoolAttrs) -> Type:
    """The type relation of every pooling op (qnn.avg_pool2d included)."""
    x = as_tensor(types[0])
    d = len(attrs.kernel)
    if x.ndim != d + 2:
        raise TypeInferenceError(f"a {d}-d pool needs {d + 2}-d input, got {x.shape}")
    if len(attrs.strides) != d or len(attrs.dilation) != d or len(attrs.padding) != 2 * d:
        raise TypeInferenceError(f"pool attributes do not match {d} spatial dims: {attrs}")
    spatial = _out_spatial(x.shape, attrs)
    if min(spatial, default=1) < 1:
        raise TypeInferenceError(f"pool output would be empty: {spatial}")
    return TensorType(x.shape[:2] + tuple(spatial), x.dtype)


def _window(x: te.Tensor, attrs: PoolAttrs, pos: tuple[E.Var, ...], rk: Sequence[te.IterVar | E.PrimExpr]
            ) -> tuple[list[E.PrimExpr], E.PrimExpr]:
    """Input index per spatial dim and whether it lies inside the input
    (`rk`: the window position, as reduce axes or index expressions)."""
    d = len(attrs.kernel)
    idx: list[E.PrimExpr] = []
    inside: E.PrimExpr = E.IntImm(1, "bool")
    for k in range(d):
        axis = rk[k]
        r = axis.var if isinstance(axis, te.IterVar) else axis
        i = E.sub(E.add(E.mul(pos[k], attrs.strides[k]), E.mul(r, attrs.dilation[k])), attrs.padding[k])
        size = x.shape[2 + k]
        inside = E.logical_and(inside, E.logical_and(E.ge(i, 0), E.lt(i, size)))
        idx.append(E.minimum(E.maximum(i, 0), size - 1))
    return idx, inside


def _window_reduce(x: te.Tensor, attrs: PoolAttrs, out: TensorType, fill: float,
                   combine, name: str) -> te.Tensor:
    """The window reduction, scheduled by stride.

    Stride 1 (e.g. Inception's 3x3 pools): the input is padded in scratch
    with `fill`, so no select remains, and the reduce axes run outside the
    output's spatial loops: the innermost loop walks a row of outputs and
    gcc vectorises it (as for convolution). The padding also covers windows
    `ceil_mode` lets run past the end. Strided windows accumulate in a
    register and guard the border with a select instead: copying the input
    would cost more than the windows save.
    """
    d = len(attrs.kernel)
    rk = [te.reduce_axis(attrs.kernel[k], f"rk{k}") for k in range(d)]
    spatial = [f"o{k}" for k in range(d)]
    names = ["n", "c", *spatial]
    if any(st != 1 for st in attrs.strides):
        neutral = E.const(fill, x.dtype)

        def guarded(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
            idx, inside = _window(x, attrs, pos, rk)
            return combine(E.select(inside, x[(n, c, *idx)], neutral), rk)

        return te.compute(out.shape, guarded, name=name, axis_names=names)
    begins = attrs.padding[:d]
    ends = tuple(
        max(0, (out.shape[2 + k] - 1) + (attrs.kernel[k] - 1) * attrs.dilation[k] + 1 - begins[k] - x.shape[2 + k])
        for k in range(d)
    )
    padded = pad_input(x, begins, ends, fill, materialize=True)

    def element(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        return combine(padded[(n, c, *(E.add(pos[k], E.mul(rk[k].var, attrs.dilation[k])) for k in range(d)))], rk)

    return te.compute(out.shape, element, name=name, axis_names=names,
                      loop_order=["n", "c", *(r.name for r in rk), *spatial])


def _max_compute(inputs: list[te.Tensor], attrs: PoolAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    call = pool2d_call(x, attrs, out, sched, average=False)
    if call is not None:
        return call
    return _window_reduce(x, attrs, out, dt.min_value(x.dtype), te.max_reduce, "max_pool")


def _count(attrs: PoolAttrs, shape: tuple[int, ...], pos: tuple[E.Var, ...]) -> E.PrimExpr:
    """Elements averaged at output `pos`: the window clipped to the (padded) input."""
    d = len(attrs.kernel)
    total: E.PrimExpr = E.IntImm(1)
    for k in range(d):
        s, dil, ker, pb, pe = attrs.strides[k], attrs.dilation[k], attrs.kernel[k], attrs.padding[k], attrs.padding[d + k]
        size = shape[2 + k]
        lo, hi = (-pb, size + pe) if attrs.count_include_pad else (0, size)
        base = E.sub(E.mul(pos[k], s), pb)  # input index of window element 0
        # window elements r with lo <= base + r*dil < hi
        first = E.maximum(E.floordiv(E.add(E.sub(lo, base), dil - 1), dil), 0)
        last = E.minimum(E.floordiv(E.add(E.sub(hi, base), dil - 1), dil), ker)
        total = E.mul(total, E.maximum(E.sub(last, first), 0))
    return total


def _single_window_means(x: te.Tensor, attrs: PoolAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor | None:
    """One unpadded window per channel that is a contiguous run (it spans every axis but the first spatial
    one, from 0: a global pool, or KWS's 24 x 5 window over 25 x 5): a row-kernel call (`row_means`)."""
    spatial = x.shape[2:]
    if (any(s != 1 for s in out.shape[2:]) or any(attrs.padding) or any(dl != 1 for dl in attrs.dilation)
            or tuple(attrs.kernel[1:]) != tuple(spatial[1:]) or attrs.kernel[0] > spatial[0]):
        return None
    return row_means(x, x.shape[0] * x.shape[1], math.prod(attrs.kernel), math.prod(spatial), tuple(out.shape), sched)


def _avg_compute(inputs: list[te.Tensor], attrs: PoolAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    call = _single_window_means(x, attrs, out, sched) or pool2d_call(x, attrs, out, sched, average=True)
    if call is not None:
        return call
    names = ["n", "c", *(f"o{k}" for k in range(len(attrs.kernel)))]
    total = _window_reduce(x, attrs, out, 0.0, te.sum, "avg_pool_sum")

    def average(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        count = E.cast(E.maximum(_count(attrs, x.shape, pos), 1), x.dtype)
        return E.div(total[(n, c, *pos)], count)

    return te.compute(out.shape, average, name="avg_pool", axis_names=names)


def _abs_power(v: E.PrimExpr, p: float) -> E.PrimExpr:
    """|v| ** p, with the common exponents as plain arithmetic."""
    if p == 2.0:
        return E.mul(v, v)
    magnitude = E.call(E.Intrinsic.FABS, [v], v.dtype)
    if p == 1.0:
        return magnitude
    return E.binary(E.BinOp.POW, magnitude, E.const(p, v.dtype))


def _root(total: E.PrimExpr, p: float) -> E.PrimExpr:
    if p == 1.0:
        return total
    if p == 2.0:
        return E.call(E.Intrinsic.SQRT, [total], total.dtype)
    return E.binary(E.BinOp.POW, total, E.const(1.0 / p, total.dtype))


def _lp_compute(inputs: list[te.Tensor], attrs: PoolAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    d = len(attrs.kernel)
    rk = [te.reduce_axis(attrs.kernel[k], f"rk{k}") for k in range(d)]
    names = ["n", "c", *(f"o{k}" for k in range(d))]
    zero = E.const(0, x.dtype)

    def element(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        idx, inside = _window(x, attrs, pos, rk)
        return te.sum(E.select(inside, _abs_power(x[(n, c, *idx)], attrs.p), zero), rk)

    total = te.compute(out.shape, element, name="lp_pool_sum", axis_names=names)
    return te.compute(out.shape, lambda *i: _root(total[i], attrs.p), name="lp_pool", axis_names=names)


def _window_values(x: np.ndarray, a: PoolAttrs, pos: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """The in-bounds window at output `pos` ((n, c, k) values) and its divisor."""
    d = len(a.kernel)
    grids = np.meshgrid(
        *[np.arange(a.kernel[k]) * a.dilation[k] + pos[k] * a.strides[k] - a.padding[k] for k in range(d)],
        indexing="ij",
    )
    valid = np.ones(grids[0].shape, bool)
    in_pad = np.ones(grids[0].shape, bool)
    for k in range(d):
        valid &= (grids[k] >= 0) & (grids[k] < x.shape[2 + k])
        in_pad &= (grids[k] >= -a.padding[k]) & (grids[k] < x.shape[2 + k] + a.padding[d + k])
    index: tuple[slice | np.ndarray, ...] = (slice(None), slice(None), *[g[valid] for g in grids])
    window = x[index]
    count = int(in_pad.sum()) if a.count_include_pad else int(valid.sum())
    return window, max(count, 1)


_WINDOW_REDUCERS = {
    "max": lambda w, count, a: w.max(axis=-1) if w.shape[-1] else -np.inf,
    "avg": lambda w, count, a: w.astype(np.float64).sum(axis=-1) / count,
    "lp": lambda w, count, a: (np.abs(w.astype(np.float64)) ** a.p).sum(axis=-1) ** (1.0 / a.p),
}


def _pool_reference(kind: str):
    reducer = _WINDOW_REDUCERS[kind]

    def ref(args: list[np.ndarray], a: PoolAttrs) -> np.ndarray:
        x = args[0]
        out_sp = _out_spatial(x.shape, a)
        out = np.zeros(x.shape[:2] + tuple(out_sp), dtype=np.float64)
        for pos in np.ndindex(*out_sp):
            window, count = _window_values(x, a, pos)
            out[(slice(None), slice(None), *pos)] = reducer(window, count, a)
        return out.astype(x.dtype)

    return ref


_COMPUTES = {"max": _max_compute, "avg": _avg_compute, "lp": _lp_compute}


def _register(kind: str, d: int) -> Op:
    return register_op(
        f"nn.{kind}_pool{d}d", type_rel=pool_type, reference=_pool_reference(kind),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=_COMPUTES[kind], attrs=PoolAttrs, num_inputs=1,
    )


max_pool1d, max_pool2d, max_pool3d = (_register("max", d) for d in (1, 2, 3))


# ------------------------------------------------- max pooling's Indices
@dataclass(frozen=True)
class PoolIndicesAttrs(PoolAttrs):
    storage_order: int = 0  # 0: row-major spatial index, 1: column-major


def _flat_spatial_index(coords: list[E.PrimExpr], shape: tuple[int, ...], column_major: bool) -> E.PrimExpr:
    order = range(len(coords) - 1, -1, -1) if column_major else range(len(coords))
    flat: E.PrimExpr = E.const(0, "int64")
    for k in order:
        flat = E.add(E.mul(flat, E.const(shape[k], "int64")), E.cast(coords[k], "int64"))
    return flat


def _indices_compute(inputs: list[te.Tensor], attrs: PoolIndicesAttrs, out: TensorType,
                     sched: ScheduleContext) -> te.Tensor:
    """The flat input index of each window's first maximum, ONNX MaxPool's
    second output: one argmax over the window flattened to a single axis."""
    x = inputs[0]
    d = len(attrs.kernel)
    names = ["n", "c", *(f"o{k}" for k in range(d))]
    r = te.reduce_axis(math.prod(attrs.kernel), "r")
    lowest = E.const(dt.min_value(x.dtype), x.dtype)

    def window_pos(flat: E.PrimExpr) -> list[E.PrimExpr]:
        return unravel(flat, attrs.kernel)

    def first_max(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        idx, inside = _window(x, attrs, pos, window_pos(r.var))
        return te.argmax(E.select(inside, x[(n, c, *idx)], lowest), r)

    best = te.compute(out.shape, first_max, name="max_pool_argmax", axis_names=names)
    spatial = tuple(x.shape[2:])

    def element(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        rk = window_pos(E.cast(best[(n, c, *pos)], "int32"))
        coords = [E.sub(E.add(E.mul(pos[k], attrs.strides[k]), E.mul(rk[k], attrs.dilation[k])), attrs.padding[k])
                  for k in range(d)]
        plane = E.add(E.mul(E.cast(n, "int64"), x.shape[1]), E.cast(c, "int64"))
        return E.add(E.mul(plane, E.const(math.prod(spatial), "int64")),
                     _flat_spatial_index(coords, spatial, attrs.storage_order == 1))

    return te.compute(out.shape, element, name="max_pool_indices", axis_names=names)


def _indices_type(types: tuple[Type, ...], attrs: PoolIndicesAttrs) -> Type:
    values = pool_type(types, attrs)
    assert isinstance(values, TensorType)
    return TensorType(values.shape, "int64")


def _indices_reference(args: list[np.ndarray], a: PoolIndicesAttrs) -> np.ndarray:
    x = args[0]
    d = len(a.kernel)
    out_sp = _out_spatial(x.shape, a)
    spatial = x.shape[2:]
    planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2]) * math.prod(spatial)
    out = np.zeros(x.shape[:2] + tuple(out_sp), dtype=np.int64)
    strides = np.cumprod((1,) + spatial[:-1]) if a.storage_order else np.cumprod((1,) + spatial[::-1][:-1])[::-1]
    for pos in np.ndindex(*out_sp):
        coords = np.stack(np.meshgrid(
            *[np.arange(a.kernel[k]) * a.dilation[k] + pos[k] * a.strides[k] - a.padding[k] for k in range(d)],
            indexing="ij",
        ), axis=-1).reshape(-1, d)
        valid = np.all((coords >= 0) & (coords < np.asarray(spatial)), axis=1)
        coords = coords[valid]
        first = np.argmax(x[(slice(None), slice(None), *coords.T)], axis=-1)  # first maximum
        out[(slice(None), slice(None), *pos)] = planes + coords[first] @ np.asarray(strides, dtype=np.int64)
    return out


max_pool_indices = register_op(
    "nn.max_pool_indices", type_rel=_indices_type, reference=_indices_reference, pattern=OpPattern.OPAQUE,
    compute=_indices_compute, attrs=PoolIndicesAttrs, num_inputs=1,
    doc="Flat NC[D]HW index of each max-pooling window's first maximum (ONNX MaxPool's Indices).",
)
avg_pool1d, avg_pool2d, avg_pool3d = (_register("avg", d) for d in (1, 2, 3))
MAX_POOL_BY_RANK = {1: max_pool1d, 2: max_pool2d, 3: max_pool3d}
AVG_POOL_BY_RANK = {1: avg_pool1d, 2: avg_pool2d, 3: avg_pool3d}
lp_pool1d, lp_pool2d, lp_pool3d = (_register("lp", d) for d in (1, 2, 3))
LP_POOL_BY_RANK = {1: lp_pool1d, 2: lp_pool2d, 3: lp_pool3d}
