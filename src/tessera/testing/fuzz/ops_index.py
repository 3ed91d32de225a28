"""Generators for gathers, scatters and OneHot.

Indices are drawn inside their valid range, negative ones included
(out-of-range Gather indices are a known tessera bug, and onnxruntime
rejects them anyway). Scatters without a reduction get indices that never
hit one element twice: ONNX leaves the winner of two writes undefined.
Indices are graph inputs or initializers, so both run-time and constant
indexing are tested.
"""

from __future__ import annotations

import math

import numpy as np

from .graph import FLOATS, NUMERIC, Facts, GraphBuilder, Reject, Value, derived
from .spec import exact_or, pick_axis, register

INDEX_DTYPES = ("int64", "int32")


def _indices(g: GraphBuilder, data: np.ndarray) -> Value:
    """An index tensor: a run-time input or a constant."""
    if data.ndim == 0:
        if "scalar_initializer" in g.avoid or g.chooser.boolean(0.5):
            return g.input(data)
        return g.constant(data, reusable=False)
    if g.chooser.boolean(0.5):
        return g.input(data)
    return g.constant(data, reusable=False)


def _draw_indices(g: GraphBuilder, n: int, shape: tuple[int, ...], negative_ok: bool = True) -> np.ndarray:
    if n == 0:
        raise Reject("no valid index into an empty axis")
    dtype = g.chooser.choice(INDEX_DTYPES)
    lo = -n if negative_ok and g.chooser.boolean(0.4) else 0
    data = g.rng.integers(lo, n, size=shape)
    if "gather_out_of_range" not in g.avoid and g.chooser.boolean(0.1) and data.size:
        data.flat[0] = n  # out of range
        g.hazards.add("gather_out_of_range")
    return np.asarray(data, dtype=dtype)


@register("Gather", "index", min_rank=1, specials_ok=True)
def _gather(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    shape = tuple(g.chooser.integer(1, 3) for _ in range(g.chooser.choice((0, 1, 1, 2))))
    idx = _indices(g, _draw_indices(g, v.shape[axis], shape))
    return g.node("Gather", [v, idx], {"axis": axis}, [derived(v)])


@register("GatherElements", "index", min_rank=1, specials_ok=True, min_opset=11)
def _gather_elements(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    shape = tuple(g.chooser.integer(1, 3) if k == axis % v.rank else g.chooser.integer(min(d, 1), d)
                  for k, d in enumerate(v.shape))
    data = _draw_indices(g, v.shape[axis], shape)
    return g.node("GatherElements", [v, _indices(g, data)], {"axis": axis}, [derived(v)])


@register("GatherND", "index", min_rank=1, specials_ok=True, min_opset=11)
def _gather_nd(g: GraphBuilder, v: Value) -> list[Value]:
    batch_dims = g.chooser.integer(0, min(v.rank - 1, 2)) if g.opset >= 12 else 0
    k = g.chooser.integer(1, v.rank - batch_dims)
    middle = tuple(g.chooser.integer(1, 3) for _ in range(g.chooser.integer(0, 2)))
    shape = v.shape[:batch_dims] + middle + (k,)
    if math.prod(shape) > g.max_elements:
        raise Reject("too many indices")
    columns = [_draw_indices(g, v.shape[batch_dims + j], shape[:-1]) for j in range(k)]
    data = np.stack(columns, axis=-1).astype(g.chooser.choice(INDEX_DTYPES[:1]))  # GatherND takes int64 only
    attrs = {"batch_dims": batch_dims} if batch_dims else {}
    return g.node("GatherND", [v, _indices(g, data)], attrs, [derived(v)])


def _unique_along(g: GraphBuilder, n: int, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Indices whose every 1-d slice along `axis` holds distinct values (a prefix of a permutation)."""
    if shape[axis] > n:
        raise Reject("more updates than positions")
    moved = list(shape)
    length = moved.pop(axis)
    rows = [g.rng.permutation(n)[:length] for _ in range(math.prod(moved))]
    flat = np.asarray(rows, dtype=np.int64).reshape(*moved, length)
    data = np.moveaxis(flat, -1, axis)
    if g.chooser.boolean(0.3):
        data = np.where(g.rng.random(data.shape) < 0.5, data - n, data)  # negative forms
    return np.ascontiguousarray(data).astype(g.chooser.choice(INDEX_DTYPES))


def _scatter_reduction(g: GraphBuilder, dtype: str) -> str:
    options = ["none", "none"]
    if g.opset >= 16:
        options += ["add", "mul"]
    if g.opset >= 18:
        options += ["max", "min"]
    return g.chooser.choice(options)


@register("ScatterElements", "index", dtypes=NUMERIC, min_rank=1, min_opset=11)
def _scatter_elements(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    a = axis % v.rank
    shape = tuple(g.chooser.integer(min(d, 1), d) for d in v.shape)
    if v.shape[a] == 0:
        raise Reject("scatter into an empty axis")
    reduction = _scatter_reduction(g, v.dtype)
    updates = g.leaf(v.dtype, shape, lo=-2 if v.dtype not in ("uint8", "uint16", "uint32", "uint64") else 0, hi=2)
    idx = _indices(g, _unique_along(g, v.shape[a], shape, a))
    fact = _scatter_facts(v, updates, reduction)
    attrs = {"axis": axis} | ({"reduction": reduction} if reduction != "none" else {})
    return g.node("ScatterElements", [v, idx, updates], attrs, [fact])


def _scatter_facts(v: Value, updates: Value, reduction: str) -> Facts:
    """Each element is touched at most once, so a reduction is one op with one update."""
    lo, hi = min(v.lo, updates.lo), max(v.hi, updates.hi)
    if reduction == "add":
        lo, hi = v.lo + min(updates.lo, 0.0), v.hi + max(updates.hi, 0.0)
    elif reduction == "mul":
        m = max(abs(v.lo), abs(v.hi)) * max(abs(updates.lo), abs(updates.hi), 1.0)
        lo, hi = -m, m
    ulps = 1 if reduction in ("add", "mul") else 0
    if reduction == "add" and v.dtype in FLOATS:
        ulps = 0  # one correctly rounded add
    return {"lo": lo, "hi": hi, "finite": v.finite, "tol": exact_or(v.dtype, [v, updates], ulps)}


@register("ScatterND", "index", dtypes=NUMERIC, min_rank=1, min_opset=11)
def _scatter_nd(g: GraphBuilder, v: Value) -> list[Value]:
    k = g.chooser.integer(1, v.rank)
    positions = math.prod(v.shape[:k])
    if positions == 0:
        raise Reject("scatter into an empty tensor")
    count = g.chooser.integer(1, min(positions, 4))
    chosen = g.rng.permutation(positions)[:count]  # distinct positions
    idx = np.stack(np.unravel_index(chosen, v.shape[:k]), axis=-1).astype(np.int64)
    if g.chooser.boolean(0.3):
        idx = np.where(g.rng.random(idx.shape) < 0.5, idx - np.asarray(v.shape[:k]), idx)
    if g.chooser.boolean(0.3) and count % 2 == 0:
        idx = idx.reshape(2, count // 2, k)
    updates_shape = idx.shape[:-1] + v.shape[k:]
    reduction = _scatter_reduction(g, v.dtype)
    updates = g.leaf(v.dtype, updates_shape, lo=0 if v.dtype.startswith("uint") else -2, hi=2)
    attrs = {"reduction": reduction} if reduction != "none" else {}
    return g.node("ScatterND", [v, _indices(g, idx), updates], attrs, [_scatter_facts(v, updates, reduction)])


# indices dtype -> the (values, depth) dtypes onnxruntime implements with it
ONE_HOT_TYPES = {"int64": (("int64", "int64"), ("float32", "int64"), ("int32", "float32"), ("float32", "float32"),
                           ("float32", "int32")),
                 "int32": (("float32", "int32"), ("float32", "float32"))}


@register("OneHot", "index", dtypes=("int64", "int32"), max_rank=3, min_opset=11)
def _one_hot(g: GraphBuilder, v: Value) -> list[Value]:
    """`v` as the indices, with a depth that puts them all inside [-depth, depth)."""
    depth = int(max(abs(v.lo), abs(v.hi))) + g.chooser.integer(1, 3)
    if v.size * depth > g.max_elements:
        raise Reject("one-hot too large")
    value_dtype, depth_dtype = g.chooser.choice(ONE_HOT_TYPES[v.dtype])
    depth_value = g.constant(np.asarray([depth], dtype=depth_dtype), reusable=False) if g.chooser.boolean() \
        else g.scalar(depth, depth_dtype)
    values = g.leaf(value_dtype, (2,))
    axis = g.chooser.integer(-v.rank - 1, v.rank)
    return g.node("OneHot", [v, depth_value, values], {"axis": axis},
                  [{"lo": values.lo, "hi": values.hi, "finite": True}])
