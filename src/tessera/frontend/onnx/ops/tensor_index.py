"""Converters for indexing operators: gathers, scatters, one-hot, triangles,
scans, sequence reversal and padding."""

from __future__ import annotations

import numpy as np

from ....op import transform_fill as tfill
from ....op import transform_gather as tg
from ....op import transform_pad as tpad
from ....op import transform_scan as tscan
from ....op import transform_scatter as ts
from ....relay.expr import Constant, Expr
from ..importer import ImportContext, Node
from ..registry import converter
from .common import ints


def _int_scalar(node: Node, ctx: ImportContext, k: int, what: str) -> int:
    value = ctx.constant(node.input(k), what)
    if value.size != 1:
        raise node.error(f"{what} must be a scalar, got shape {value.shape}")
    return int(value.reshape(()))


# -------------------------------------------------------------- gathers
@converter("Gather", since=1)
def gather(node: Node, ctx: ImportContext) -> Expr:
    return tg.take(node.input(0), node.input(1), axis=int(node.attr("axis", 0)))


@converter("GatherElements", since=11)
def gather_elements(node: Node, ctx: ImportContext) -> Expr:
    return tg.gather_elements(node.input(0), node.input(1), axis=int(node.attr("axis", 0)))


@converter("GatherND", since=11)
def gather_nd(node: Node, ctx: ImportContext) -> Expr:
    return tg.gather_nd(node.input(0), node.input(1), batch_dims=int(node.attr("batch_dims", 0)))


# ------------------------------------------------------------- scatters
# reductions each opset accepts
_SCATTER_REDUCTIONS = {11: ("none",), 16: ("none", "add", "mul"), 18: ("none", "add", "mul", "max", "min")}


def _reduction(node: Node) -> str:
    reduction = node.attr("reduction", "none")
    allowed = _SCATTER_REDUCTIONS[max(v for v in _SCATTER_REDUCTIONS if v <= max(node.opset, 11))]
    if reduction not in allowed:
        raise node.error(f"reduction={reduction!r} is not valid at opset {node.opset}; expected one of {allowed}")
    return reduction


@converter("Scatter", since=9)
def scatter(node: Node, ctx: ImportContext) -> Expr:
    return ts.scatter_elements(node.input(0), node.input(1), node.input(2), axis=int(node.attr("axis", 0)))


@converter("ScatterElements", since=11)
def scatter_elements(node: Node, ctx: ImportContext) -> Expr:
    return ts.scatter_elements(node.input(0), node.input(1), node.input(2), axis=int(node.attr("axis", 0)),
                               reduction=_reduction(node))


@converter("ScatterND", since=11)
def scatter_nd(node: Node, ctx: ImportContext) -> Expr:
    return ts.scatter_nd(node.input(0), node.input(1), node.input(2), reduction=_reduction(node))


# ------------------------------------------------------------ positional
@converter("OneHot", since=9)
def one_hot(node: Node, ctx: ImportContext) -> Expr:
    depth = ctx.constant(node.input(1), "depth")
    if depth.size != 1:
        raise node.error(f"depth must be a scalar, got shape {depth.shape}")
    return tfill.one_hot(node.input(0), node.input(2), depth=int(depth.reshape(())),
                         axis=int(node.attr("axis", -1)))


@converter("Trilu", since=14)
def trilu(node: Node, ctx: ImportContext) -> Expr:
    k = 0 if node.optional_input(1) is None else _int_scalar(node, ctx, 1, "k")
    return tfill.trilu(node.input(0), k=k, upper=bool(node.attr("upper", 1)))


@converter("CumSum", since=11)
def cumsum(node: Node, ctx: ImportContext) -> Expr:
    return tscan.cumsum(node.input(0), axis=_int_scalar(node, ctx, 1, "axis"),
                        exclusive=bool(node.attr("exclusive", 0)), reverse=bool(node.attr("reverse", 0)))


@converter("ReverseSequence", since=10)
def reverse_sequence(node: Node, ctx: ImportContext) -> Expr:
    return tg.reverse_sequence(node.input(0), node.input(1), time_axis=int(node.attr("time_axis", 0)),
                               batch_axis=int(node.attr("batch_axis", 1)))


# ------------------------------------------------------------------ pad
def _pad(node: Node, ctx: ImportContext, pads: tuple[int, ...], value: Expr | float,
         axes: tuple[int, ...] | None) -> Expr:
    x = node.input(0)
    dims = ctx.shape_of(x)
    rank = len(dims)
    axes = tuple(range(rank)) if axes is None else axes
    if len(pads) != 2 * len(axes):
        raise node.error(f"pads needs {2 * len(axes)} values (begins, then ends), got {len(pads)}")
    widths = [(0, 0)] * rank
    for n, a in enumerate(axes):
        if not -rank <= a < rank:
            raise node.error(f"axis {a} is out of range for rank {rank}")
        widths[a % rank] = (pads[n], pads[n + len(axes)])
    mode = node.attr("mode", "constant")
    if mode not in tpad.PAD_MODES:
        raise node.error(f"mode={mode!r} is not valid; expected one of {', '.join(tpad.PAD_MODES)}")
    if not isinstance(value, Expr):
        value = Constant(np.asarray(value, dtype=ctx.dtype_of(x)))
    return tpad.pad(x, value, pad_width=tuple(widths), mode=mode)


@converter("Pad", since=1)
def pad_1(node: Node, ctx: ImportContext) -> Expr:
    pads = ints(node.attr("paddings" if node.opset < 2 else "pads"))
    return _pad(node, ctx, pads, float(node.attr("value", 0.0)), None)


@converter("Pad", since=11)
def pad_11(node: Node, ctx: ImportContext) -> Expr:
    pads = ints(ctx.constant(node.input(1), "the pads"))
    value = node.optional_input(2)
    if value is not None and ctx.type_of(value).size != 1:
        raise node.error(f"constant_value must be a scalar, got shape {ctx.shape_of(value)}")
    axes_expr = node.optional_input(3)
    axes = None if axes_expr is None else ints(ctx.constant(axes_expr, "the axes"))
    return _pad(node, ctx, pads, 0.0 if value is None else value, axes)
