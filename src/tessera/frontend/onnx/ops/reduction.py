"""Converters for reductions (Reduce*), ArgMax/ArgMin and TopK.

The axes of a Reduce* op are an attribute up to opset 12 (ReduceSum) or 17
(the others) and an optional input afterwards; an empty or missing axes
list reduces every axis unless `noop_with_empty_axes` is set. A reduction
over an empty axis has a compile-time result (the combiner's identity).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .... import dtype as dt
from ....op import elemwise as ew
from ....op import reduce as red
from ....op import transform as tf
from ....op.registry import Op
from ....relay.expr import Constant, Expr, TupleGetItem
from ..importer import ImportContext, Node
from ..registry import converter
from .common import ints

Builder = Callable[[Expr, tuple[int, ...], bool, tuple[int, ...]], Expr]


def _square(x: Expr) -> Expr:
    return ew.multiply(x, x)


def _log_sum_exp(x: Expr, axes: tuple[int, ...], keepdims: bool, shape: tuple[int, ...]) -> Expr:
    """log(sum(exp(x - max))) + max: exp never overflows."""
    top = red.max(x, axes=axes, keepdims=True)
    total = red.sum(ew.exp(ew.subtract(x, top)), axes=axes, keepdims=keepdims)
    out_shape = red.reduced_shape(shape, axes, keepdims)
    return ew.add(ew.log(total), tf.reshape(top, newshape=out_shape))


def _simple(op: Op) -> Builder:
    return lambda x, axes, keepdims, shape: op(x, axes=axes, keepdims=keepdims)


def _pre(op: Op, f: Callable[[Expr], Expr]) -> Builder:
    return lambda x, axes, keepdims, shape: op(f(x), axes=axes, keepdims=keepdims)


def _post(builder: Builder, f: Callable[[Expr], Expr]) -> Builder:
    return lambda x, axes, keepdims, shape: f(builder(x, axes, keepdims, shape))


def _lowest(dtype: str) -> float | int:
    return dt.min_value(dtype)


def _highest(dtype: str) -> float | int:
    return dt.max_value(dtype)


def _identity(x: Expr) -> Expr:
    return x


@dataclass(frozen=True)
class _Reduction:
    axes_input_since: int  # first opset taking axes as an input
    build: Builder
    empty_value: Callable[[str], float | int]  # the result over an empty axis
    # the result with noop_with_empty_axes: the reduction over no axis, i.e. its elementwise part
    # (ReduceSumSquare gives x * x, not x, as onnxruntime and the ONNX reference compute it)
    unreduced: Callable[[Expr], Expr] = _identity


_REDUCTIONS: dict[str, _Reduction] = {
    "ReduceSum": _Reduction(13, _simple(red.sum), lambda d: 0),
    "ReduceMean": _Reduction(18, _simple(red.mean), lambda d: math.nan),
    "ReduceMax": _Reduction(18, _simple(red.max), _lowest),
    "ReduceMin": _Reduction(18, _simple(red.min), _highest),
    "ReduceProd": _Reduction(18, _simple(red.prod), lambda d: 1),
    "ReduceL1": _Reduction(18, _pre(red.sum, ew.abs), lambda d: 0, ew.abs),
    "ReduceL2": _Reduction(18, _post(_pre(red.sum, _square), ew.sqrt), lambda d: 0, lambda x: ew.sqrt(_square(x))),
    "ReduceSumSquare": _Reduction(18, _pre(red.sum, _square), lambda d: 0, _square),
    "ReduceLogSum": _Reduction(18, _post(_simple(red.sum), ew.log), lambda d: -math.inf, ew.log),
    # log(exp(x)) is x: computed as written it would underflow to -inf for x < -103 (float32)
    "ReduceLogSumExp": _Reduction(18, _log_sum_exp, lambda d: -math.inf),
}


def _reduce_axes(node: Node, ctx: ImportContext, spec: _Reduction, ndim: int) -> tuple[int, ...] | None:
    """Normalised axes to reduce, or None for no reduction at all (noop_with_empty_axes)."""
    if node.opset >= spec.axes_input_since:
        given = node.optional_input(1)
        axes = () if given is None else ints(ctx.constant(given, "the axes input"))
        if not axes and int(node.attr("noop_with_empty_axes", 0)):
            return None
    else:
        axes = ints(node.attr("axes", []))
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise node.error(f"axis {a} is out of range for a {ndim}-d input (valid: {-ndim}..{ndim - 1})")
    return tuple(sorted({a % ndim for a in axes})) if axes else tuple(range(ndim))


def _register_reduction(op_type: str, spec: _Reduction) -> None:
    @converter(op_type, since=1)
    def convert(node: Node, ctx: ImportContext) -> Expr:
        x = node.input(0)
        shape, dtype = ctx.shape_of(x), ctx.dtype_of(x)
        axes = _reduce_axes(node, ctx, spec, len(shape))
        if axes is None:
            return spec.unreduced(x)
        keepdims = bool(int(node.attr("keepdims", 1)))
        if any(shape[a] == 0 for a in axes):
            out_shape = red.reduced_shape(shape, axes, keepdims)
            return Constant(np.full(out_shape, spec.empty_value(dtype), dtype=dtype))
        return spec.build(x, axes, keepdims, shape)


for _op_type, _spec in _REDUCTIONS.items():
    _register_reduction(_op_type, _spec)


# ------------------------------------------------------------ arg-reductions
def _arg_reduce(node: Node, ctx: ImportContext, op: Op) -> Expr:
    x = node.input(0)
    ndim = len(ctx.shape_of(x))
    axis = int(node.attr("axis", 0))
    if not -ndim <= axis < ndim:
        raise node.error(f"axis {axis} is out of range for a {ndim}-d input (valid: {-ndim}..{ndim - 1})")
    if ctx.shape_of(x)[axis] == 0:
        raise node.error(f"cannot take {node.op_type} over the empty axis {axis}")
    return op(x, axis=axis, keepdims=bool(int(node.attr("keepdims", 1))),
              select_last_index=bool(int(node.attr("select_last_index", 0))))


@converter("ArgMax", since=1)
def arg_max(node: Node, ctx: ImportContext) -> Expr:
    return _arg_reduce(node, ctx, red.argmax)


@converter("ArgMin", since=1)
def arg_min(node: Node, ctx: ImportContext) -> Expr:
    return _arg_reduce(node, ctx, red.argmin)


# --------------------------------------------------------------------- TopK
@converter("TopK", since=1)
def top_k(node: Node, ctx: ImportContext) -> list[Expr]:
    """Values and indices, sorted (ties: lower index first). `k` must be a
    compile-time constant: the output shape depends on it."""
    x = node.input(0)
    shape = ctx.shape_of(x)
    if node.opset < 10:
        k = int(node.attr("k"))
    else:
        k_value = np.asarray(ctx.constant(node.input(1), "the k input")).reshape(-1)
        if k_value.size != 1:
            raise node.error(f"k must hold one value, got shape {k_value.shape}")
        k = int(k_value[0])
    axis = int(node.attr("axis", -1))
    if not -len(shape) <= axis < len(shape):
        raise node.error(f"axis {axis} is out of range for a {len(shape)}-d input")
    if not 1 <= k <= shape[axis]:
        raise node.error(f"k={k} must be in 1..{shape[axis]} (the size of axis {axis})")
    # typed once here: the importer types each output on its own, which would copy an untyped call per output
    result = ctx.typed(red.topk(x, k=k, axis=axis, largest=bool(int(node.attr("largest", 1)))))
    return [TupleGetItem(result, 0), TupleGetItem(result, 1)]
