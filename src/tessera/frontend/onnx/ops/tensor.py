"""Converters for shape and data-movement operators."""

from __future__ import annotations

import numpy as np

from ....op import transform as tf
from ....relay.expr import Constant, Expr
from ..importer import ImportContext, Node
from ..registry import converter
from .common import axes_input_or_attr, ints


def reshape_target(shape: tuple[int, ...], spec: tuple[int, ...], allowzero: bool, node: Node) -> tuple[int, ...]:
    """ONNX Reshape semantics: 0 copies a dim (unless allowzero), -1 is inferred."""
    out = [shape[k] if (v == 0 and not allowzero) else v for k, v in enumerate(spec)]
    if out.count(-1) > 1:
        raise node.error(f"shape {list(spec)} has more than one -1")
    if -1 in out:
        known = int(np.prod([v for v in out if v != -1], dtype=np.int64))
        total = int(np.prod(shape, dtype=np.int64))
        if known == 0 or total % known:
            raise node.error(f"cannot reshape {shape} to {list(spec)}")
        out[out.index(-1)] = total // known
    return tuple(out)


@converter("Reshape", since=1)
def reshape(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    spec = ints(node.attr("shape")) if node.opset < 5 else ints(ctx.constant(node.input(1), "the target shape"))
    target = reshape_target(ctx.shape_of(x), spec, bool(node.attr("allowzero", 0)), node)
    return tf.reshape(x, newshape=target)


@converter("Flatten", since=1)
def flatten(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    shape = ctx.shape_of(x)
    axis = int(node.attr("axis", 1))
    axis = axis % len(shape) if axis < 0 else axis
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    return tf.reshape(x, newshape=(outer, int(np.prod(shape[axis:], dtype=np.int64))))


@converter("Transpose", since=1)
def transpose(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    nd = len(ctx.shape_of(x))
    perm = ints(node.attr("perm", list(range(nd - 1, -1, -1))))
    return tf.transpose(x, axes=perm)


@converter("Concat", since=1)
def concat(node: Node, ctx: ImportContext) -> Expr:
    parts = [node.input(k) for k in range(len(node.inputs))]
    return tf.concatenate(*parts, axis=int(node.attr("axis", 1)))


@converter("Unsqueeze", since=1)
def unsqueeze(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    axes = axes_input_or_attr(node, ctx, 1)
    if axes is None:
        raise node.error("missing axes")
    shape = list(ctx.shape_of(x))
    rank = len(shape) + len(axes)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    return tf.reshape(x, newshape=tuple(shape))


@converter("Squeeze", since=1)
def squeeze(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    shape = ctx.shape_of(x)
    axes = axes_input_or_attr(node, ctx, 1)
    if axes is None:
        axes = tuple(k for k, s in enumerate(shape) if s == 1)
    axes = tuple(a % len(shape) for a in axes)
    for a in axes:
        if shape[a] != 1:
            raise node.error(f"cannot squeeze axis {a} of size {shape[a]}")
    return tf.reshape(x, newshape=tuple(s for k, s in enumerate(shape) if k not in axes))


@converter("Shape", since=1)
def shape(node: Node, ctx: ImportContext) -> Expr:
    dims = np.asarray(ctx.shape_of(node.input(0)), dtype=np.int64)
    start, end = int(node.attr("start", 0)), node.attr("end", None)
    return Constant(dims[start:None if end is None else int(end)])


@converter("Constant", since=1)
def constant(node: Node, ctx: ImportContext) -> Expr:
    for key in ("value", "value_float", "value_int", "value_floats", "value_ints"):
        if key in node.attrs:
            value = node.attrs[key]
            if key == "value_float" or key == "value_floats":
                return Constant(np.asarray(value, dtype=np.float32))
            if key == "value_int" or key == "value_ints":
                return Constant(np.asarray(value, dtype=np.int64))
            return Constant(np.asarray(value))
    raise node.error(f"unsupported Constant form (attributes: {sorted(node.attrs)})")


@converter("ConstantOfShape", since=9)
def constant_of_shape(node: Node, ctx: ImportContext) -> Expr:
    dims = ints(ctx.constant(node.input(0), "the shape"))
    value = node.attr("value", np.zeros(1, dtype=np.float32))
    value = np.asarray(value).reshape(-1)
    return Constant(np.full(dims, value[0], dtype=value.dtype))
