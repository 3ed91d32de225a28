"""Converters for shape and data-movement operators.

Shapes are static in tessera, so every input that decides a shape (a
Reshape's target, Slice bounds, Tile repeats, ...) is read at compile time
with `ctx.constant`; operators whose value is fully known (Shape, Size,
Range, EyeLike, ConstantOfShape) become constants.
"""

from __future__ import annotations

import numpy as np

from ....errors import TypeInferenceError
from ....op import transform as tf
from ....op._util import broadcast_shapes
from ....relay.expr import Constant, Expr
from ..importer import ONNX_DTYPES, ImportContext, Node
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
    if not -len(shape) <= axis <= len(shape):
        raise node.error(f"axis {axis} is out of range for a {len(shape)}-d input "
                         f"(valid: {-len(shape)}..{len(shape)})")
    axis = axis + len(shape) if axis < 0 else axis
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
    axis = int(node.attr("axis", 1))
    rank = len(ctx.shape_of(parts[0]))
    if -rank <= axis < rank:
        # inputs empty along the axis add nothing (exported graphs pad with 0-length constants)
        parts = [p for p in parts if ctx.shape_of(p)[axis] != 0] or parts
    return parts[0] if len(parts) == 1 else tf.concatenate(*parts, axis=axis)


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


# ------------------------------------------------------- known values
@converter("Shape", since=1)
def shape(node: Node, ctx: ImportContext) -> Expr:
    dims = np.asarray(ctx.shape_of(node.input(0)), dtype=np.int64)
    start, end = int(node.attr("start", 0)), node.attr("end", None)
    return Constant(dims[start:None if end is None else int(end)])


@converter("Size", since=1)
def size(node: Node, ctx: ImportContext) -> Expr:
    return Constant(np.asarray(np.prod(ctx.shape_of(node.input(0)), dtype=np.int64), dtype=np.int64))


_CONSTANT_ATTRS = {
    "value": lambda v: np.asarray(v),
    "value_float": lambda v: np.asarray(v, dtype=np.float32),
    "value_floats": lambda v: np.asarray(v, dtype=np.float32),
    "value_int": lambda v: np.asarray(v, dtype=np.int64),
    "value_ints": lambda v: np.asarray(v, dtype=np.int64),
}


@converter("Constant", since=1)
def constant(node: Node, ctx: ImportContext) -> Expr:
    for key, make in _CONSTANT_ATTRS.items():
        if key in node.attrs:
            return Constant(make(node.attrs[key]))
    raise node.error(f"unsupported Constant form (attributes: {sorted(node.attrs)}); "
                     f"supported: {', '.join(_CONSTANT_ATTRS)}")


@converter("ConstantOfShape", since=9)
def constant_of_shape(node: Node, ctx: ImportContext) -> Expr:
    dims = ints(ctx.constant(node.input(0), "the shape"))
    value = node.attr("value", np.zeros(1, dtype=np.float32))
    value = np.asarray(value).reshape(-1)
    return Constant(np.full(dims, value[0], dtype=value.dtype))


def _scalar(node: Node, ctx: ImportContext, k: int, what: str) -> np.ndarray:
    value = ctx.constant(node.input(k), what)
    if value.size != 1:
        raise node.error(f"{what} must be a scalar, got shape {value.shape}")
    return value.reshape(())


@converter("Range", since=11)
def range_(node: Node, ctx: ImportContext) -> Expr:
    start, limit, delta = (_scalar(node, ctx, k, w) for k, w in enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise node.error("delta cannot be 0")
    return Constant(np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype))


@converter("EyeLike", since=9)
def eye_like(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    dims = ctx.shape_of(x)
    if len(dims) != 2:
        raise node.error(f"EyeLike needs a 2-D input, got shape {dims}")
    dtype = ctx.dtype_of(x)
    if "dtype" in node.attrs:
        code = int(node.attrs["dtype"])
        if code not in ONNX_DTYPES:
            raise node.error(f"dtype {code} is not supported; supported: {sorted(ONNX_DTYPES.values())}")
        dtype = ONNX_DTYPES[code]
    return Constant(np.eye(dims[0], dims[1], k=int(node.attr("k", 0)), dtype=dtype))


# ----------------------------------------------------------- broadcasts
@converter("Expand", since=8)
def expand(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    target = ints(ctx.constant(node.input(1), "the target shape"))
    try:
        out = broadcast_shapes(ctx.shape_of(x), target)
    except TypeInferenceError as err:
        raise node.error(str(err)) from None
    return x if out == ctx.shape_of(x) else tf.broadcast_to(x, shape=out)


@converter("Tile", since=6)
def tile(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    reps = ints(ctx.constant(node.input(1), "the repeats"))
    if len(reps) != len(ctx.shape_of(x)) or any(r < 0 for r in reps):
        raise node.error(f"repeats must hold {len(ctx.shape_of(x))} non-negative values, got {list(reps)}")
    return tf.tile(x, reps=reps)


# --------------------------------------------------------------- slices
def _full_slice(x_shape: tuple[int, ...], node: Node, starts: tuple[int, ...], ends: tuple[int, ...],
                axes: tuple[int, ...] | None, steps: tuple[int, ...] | None) -> dict[str, tuple[int, ...]]:
    """strided_slice attributes covering every axis."""
    rank = len(x_shape)
    axes = tuple(range(len(starts))) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.error(f"starts/ends/axes/steps differ in length: {len(starts)}/{len(ends)}/{len(axes)}/{len(steps)}")
    begin, end, stride = [0] * rank, list(x_shape), [1] * rank
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        if not -rank <= a < rank or a % rank in seen:
            raise node.error(f"axis {a} is out of range or repeated (rank {rank})")
        if st == 0:
            raise node.error("slice steps cannot be 0")
        a %= rank
        seen.add(a)
        begin[a], end[a], stride[a] = s, e, st
    return {"begin": tuple(begin), "end": tuple(end), "strides": tuple(stride)}


@converter("Slice", since=1)
def slice_1(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)
    axes = node.attr("axes", None)
    attrs = _full_slice(ctx.shape_of(x), node, ints(node.attr("starts")), ints(node.attr("ends")),
                        ints(axes) if axes is not None else None, None)
    return tf.strided_slice(x, **attrs)


@converter("Slice", since=10)
def slice_10(node: Node, ctx: ImportContext) -> Expr:
    x = node.input(0)

    def optional(k: int, what: str) -> tuple[int, ...] | None:
        e = node.optional_input(k)
        return None if e is None else ints(ctx.constant(e, what))

    attrs = _full_slice(ctx.shape_of(x), node, ints(ctx.constant(node.input(1), "starts")),
                        ints(ctx.constant(node.input(2), "ends")), optional(3, "axes"), optional(4, "steps"))
    return tf.strided_slice(x, **attrs)


def _split_sizes(node: Node, ctx: ImportContext, extent: int) -> tuple[int, ...]:
    """Chunk lengths: given (attribute before opset 13, input since), else equal parts."""
    e = node.optional_input(1)
    if e is not None:
        sizes = ints(ctx.constant(e, "the split sizes"))
    elif "split" in node.attrs and node.opset < 13:
        sizes = ints(node.attrs["split"])
    else:
        n = int(node.attr("num_outputs", node.num_outputs))
        if n < 1:
            raise node.error(f"cannot split into {n} outputs")
        chunk = -(-extent // n)  # ceil: only the last chunk may be smaller
        sizes = (chunk,) * (n - 1) + (extent - chunk * (n - 1),)
    if sum(sizes) != extent or any(s < 0 for s in sizes):
        raise node.error(f"split sizes {list(sizes)} do not add up to the axis length {extent}")
    if len(sizes) != node.num_outputs:
        raise node.error(f"{len(sizes)} split sizes for {node.num_outputs} outputs")
    return sizes


@converter("Split", since=1)
def split(node: Node, ctx: ImportContext) -> list[Expr]:
    x = node.input(0)
    dims = ctx.shape_of(x)
    axis = int(node.attr("axis", 0))
    if not -len(dims) <= axis < len(dims):
        raise node.error(f"axis {axis} is out of range for rank {len(dims)}")
    axis %= len(dims)
    outputs, offset = [], 0
    for length in _split_sizes(node, ctx, dims[axis]):
        begin, end = [0] * len(dims), list(dims)
        begin[axis], end[axis] = offset, offset + length
        outputs.append(tf.strided_slice(x, begin=tuple(begin), end=tuple(end), strides=(1,) * len(dims)))
        offset += length
    return outputs


# ------------------------------------------------------ block shuffles
def _blocks(node: Node, ctx: ImportContext) -> tuple[int, int, int, int, int, str]:
    """(n, c, h, w, blocksize, mode) of a DepthToSpace/SpaceToDepth node."""
    dims = ctx.shape_of(node.input(0))
    if len(dims) != 4:
        raise node.error(f"input must be 4-D (N, C, H, W), got shape {dims}")
    n, c, h, w = dims
    bs = int(node.attr("blocksize"))
    mode = node.attr("mode", "DCR")
    if bs < 1 or mode not in ("DCR", "CRD"):
        raise node.error(f"blocksize must be >= 1 and mode DCR or CRD, got {bs} and {mode!r}")
    return n, c, h, w, bs, mode


@converter("DepthToSpace", since=1)
def depth_to_space(node: Node, ctx: ImportContext) -> Expr:
    n, c, h, w, bs, mode = _blocks(node, ctx)
    if c % (bs * bs):
        raise node.error(f"channels ({c}) must be a multiple of blocksize^2 ({bs * bs})")
    c_out = c // (bs * bs)
    if mode == "DCR":
        split, perm = (n, bs, bs, c_out, h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c_out, bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    x = tf.transpose(tf.reshape(node.input(0), newshape=split), axes=perm)
    return tf.reshape(x, newshape=(n, c_out, h * bs, w * bs))


@converter("SpaceToDepth", since=1)
def space_to_depth(node: Node, ctx: ImportContext) -> Expr:
    n, c, h, w, bs, mode = _blocks(node, ctx)
    if h % bs or w % bs:
        raise node.error(f"height and width ({h}, {w}) must be multiples of blocksize {bs}")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    x = tf.reshape(node.input(0), newshape=(n, c, h // bs, bs, w // bs, bs))
    return tf.reshape(tf.transpose(x, axes=perm), newshape=(n, c * bs * bs, h // bs, w // bs))
