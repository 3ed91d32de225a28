"""N-d max and average pooling (NC[D]HW), global pooling is `mean`/`max`.

Padding is folded into the reads (a select against the border), and the
average's divisor is computed per output position in closed form, so both
ONNX `count_include_pad` modes and `ceil_mode` windows are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtype as dt
from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...tir import expr as E
from .._util import as_tensor
from ..registry import Op, OpPattern, register_op


@dataclass(frozen=True)
class PoolAttrs:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[int, ...]  # begins, then ends
    dilation: tuple[int, ...]
    ceil_mode: bool = False
    count_include_pad: bool = False  # average pooling only


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


def _pool_type(types: tuple[Type, ...], attrs: PoolAttrs) -> Type:
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


def _window(x: te.Tensor, attrs: PoolAttrs, pos: tuple[E.Var, ...], rk: list[te.IterVar]):
    """Input index per spatial dim and whether it lies inside the input."""
    d = len(attrs.kernel)
    idx, inside = [], E.IntImm(1, "bool")
    for k in range(d):
        i = E.sub(E.add(E.mul(pos[k], attrs.strides[k]), E.mul(rk[k].var, attrs.dilation[k])), attrs.padding[k])
        size = x.shape[2 + k]
        inside = E.logical_and(inside, E.logical_and(E.ge(i, 0), E.lt(i, size)))
        idx.append(E.minimum(E.maximum(i, 0), size - 1))
    return idx, inside


def _max_compute(inputs: list[te.Tensor], attrs: PoolAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]
    d = len(attrs.kernel)
    rk = [te.reduce_axis(attrs.kernel[k], f"rk{k}") for k in range(d)]
    lowest = E.const(dt.min_value(x.dtype), x.dtype)

    def element(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        idx, inside = _window(x, attrs, pos, rk)
        return te.max_reduce(E.select(inside, x[(n, c, *idx)], lowest), rk)

    return te.compute(out.shape, element, name="max_pool", axis_names=["n", "c", *(f"o{k}" for k in range(d))])


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


def _avg_compute(inputs: list[te.Tensor], attrs: PoolAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]
    d = len(attrs.kernel)
    rk = [te.reduce_axis(attrs.kernel[k], f"rk{k}") for k in range(d)]
    names = ["n", "c", *(f"o{k}" for k in range(d))]
    zero = E.const(0, x.dtype)

    def element(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        idx, inside = _window(x, attrs, pos, rk)
        return te.sum(E.select(inside, x[(n, c, *idx)], zero), rk)

    total = te.compute(out.shape, element, name="avg_pool_sum", axis_names=names)

    def average(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        count = E.cast(E.maximum(_count(attrs, x.shape, pos), 1), x.dtype)
        return E.div(total[(n, c, *pos)], count)

    return te.compute(out.shape, average, name="avg_pool", axis_names=names)


def _pool_reference(kind: str):
    def ref(args: list[np.ndarray], a: PoolAttrs) -> np.ndarray:
        x = args[0]
        d = len(a.kernel)
        out_sp = _out_spatial(x.shape, a)
        out = np.zeros(x.shape[:2] + tuple(out_sp), dtype=np.float64)
        for pos in np.ndindex(*out_sp):
            vals, count = [], 0
            slices = []
            for k in range(d):
                idx = np.arange(a.kernel[k]) * a.dilation[k] + pos[k] * a.strides[k] - a.padding[k]
                slices.append(idx)
            grids = np.meshgrid(*slices, indexing="ij")
            valid = np.ones(grids[0].shape, bool)
            for k in range(d):
                valid &= (grids[k] >= 0) & (grids[k] < x.shape[2 + k])
            coords = [g[valid] for g in grids]
            window = x[(slice(None), slice(None), *coords)] if coords[0].size else None
            if kind == "max":
                out[(slice(None), slice(None), *pos)] = window.max(axis=-1) if window is not None else -np.inf
            else:
                if a.count_include_pad:
                    in_pad = np.ones(grids[0].shape, bool)
                    for k in range(d):
                        in_pad &= (grids[k] >= -a.padding[k]) & (grids[k] < x.shape[2 + k] + a.padding[d + k])
                    count = int(in_pad.sum())
                else:
                    count = int(valid.sum())
                total = window.sum(axis=-1) if window is not None else 0.0
                out[(slice(None), slice(None), *pos)] = total / max(count, 1)
                del vals
        return out.astype(x.dtype)

    return ref


def _register(kind: str, d: int) -> Op:
    compute = _max_compute if kind == "max" else _avg_compute
    return register_op(
        f"nn.{kind}_pool{d}d", type_rel=_pool_type, reference=_pool_reference(kind),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=compute, attrs=PoolAttrs, num_inputs=1,
    )


max_pool1d, max_pool2d, max_pool3d = (_register("max", d) for d in (1, 2, 3))
avg_pool1d, avg_pool2d, avg_pool3d = (_register("avg", d) for d in (1, 2, 3))
MAX_POOL_BY_RANK = {1: max_pool1d, 2: max_pool2d, 3: max_pool3d}
AVG_POOL_BY_RANK = {1: avg_pool1d, 2: avg_pool2d, 3: avg_pool3d}
