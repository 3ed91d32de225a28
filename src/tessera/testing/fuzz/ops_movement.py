"""Generators for data movement: reshapes, transposes, slices, pads, tiles.

Moving data never rounds, so every output keeps its input's facts. Shape
arguments are initializers (tessera needs them at compile time), drawn to
cover ONNX's conventions: 0 and -1 in Reshape, negative and out-of-range
Slice bounds, negative steps, negative (cropping) pads.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from .graph import ALL_DTYPES, Facts, GraphBuilder, Reject, Value, derived
from .ops_binary import partner_shape
from .spec import pick_axes, pick_axis, register


BLOCK_DTYPES = ("float32", "float64", "int8", "uint8")  # what onnxruntime implements
EYE_DTYPES = ("float32", "float64", "int32", "int64", "uint64")


def factorize(g: GraphBuilder, size: int, rank: int) -> list[int]:
    """Random dims of product `size`."""
    if size == 0:
        dims = [g.chooser.integer(1, 3) for _ in range(rank)]
        if rank == 0:
            raise Reject("a 0-d shape cannot hold zero elements")
        dims[g.chooser.integer(0, rank - 1)] = 0
        return dims
    dims = [1] * rank
    left = size
    for k in range(rank - 1):
        divisors = [d for d in range(1, left + 1) if left % d == 0]
        dims[k] = g.chooser.choice(divisors)
        left //= dims[k]
    if rank:
        dims[-1] = left
    elif left != 1:
        raise Reject(f"{size} elements do not fit a 0-d shape")
    return dims


def _zero_dims(g: GraphBuilder, spec: list[int]) -> dict[str, object]:
    """Reshape attributes for `spec`: a 0 in it means "copy the input's dim" unless allowzero=1."""
    if 0 not in spec:
        return {}
    if g.opset < 14:
        raise Reject("a literal 0 in a Reshape target needs allowzero (opset 14)")
    return {"allowzero": 1}


def reshaped(g: GraphBuilder, v: Value, shape: list[int]) -> Value:
    if list(v.shape) == shape:
        return v
    return g.node("Reshape", [v, g.ints(shape)], _zero_dims(g, shape), [derived(v)])[0]


@register("Reshape", "movement")
def _reshape(g: GraphBuilder, v: Value) -> list[Value]:
    rank = g.chooser.integer(0 if v.size == 1 else 1, 4)
    dims = factorize(g, v.size, rank)
    attrs = _zero_dims(g, dims)
    spec = list(dims)
    if rank and v.size and g.chooser.boolean(0.4):
        spec[g.chooser.integer(0, rank - 1)] = -1
    for k in range(min(rank, v.rank)):  # 0 copies the input's dim
        if not attrs and spec[k] == v.shape[k] and g.chooser.boolean(0.3):
            spec[k] = 0
    return g.node("Reshape", [v, g.ints(spec)], attrs, [derived(v)])


@register("Flatten", "movement", min_rank=1)
def _flatten(g: GraphBuilder, v: Value) -> list[Value]:
    axis = g.chooser.integer(-v.rank, v.rank)
    return g.node("Flatten", [v], {"axis": axis}, [derived(v)])


@register("Transpose", "movement", min_rank=2)
def _transpose(g: GraphBuilder, v: Value) -> list[Value]:
    if g.chooser.boolean(0.2):
        return g.node("Transpose", [v], outputs=[derived(v)])  # default: reversed axes
    pool = list(range(v.rank))
    perm = []
    while pool:
        perm.append(pool.pop(g.chooser.integer(0, len(pool) - 1)))
    return g.node("Transpose", [v], {"perm": perm}, [derived(v)])


@register("Squeeze", "movement", min_rank=1)
def _squeeze(g: GraphBuilder, v: Value) -> list[Value]:
    ones = [k for k, d in enumerate(v.shape) if d == 1]
    if not ones:
        raise Reject("no axis of size 1")
    if g.chooser.boolean(0.3):
        return g.node("Squeeze", [v], outputs=[derived(v)])
    axes = [a - v.rank if g.chooser.boolean(0.3) else a for a in ones if g.chooser.boolean(0.7)] or ones[:1]
    if g.opset < 13:
        return g.node("Squeeze", [v], {"axes": axes}, [derived(v)])
    return g.node("Squeeze", [v, g.ints(axes)], outputs=[derived(v)])


@register("Unsqueeze", "movement", max_rank=4)
def _unsqueeze(g: GraphBuilder, v: Value) -> list[Value]:
    count = g.chooser.integer(1, 2)
    out_rank = v.rank + count
    axes: list[int] = []
    while len(axes) < count:
        a = g.chooser.integer(-out_rank, out_rank - 1)
        if a % out_rank not in {x % out_rank for x in axes}:
            axes.append(a)
    if g.opset < 13:
        return g.node("Unsqueeze", [v], {"axes": axes}, [derived(v)])
    return g.node("Unsqueeze", [v, g.ints(axes)], outputs=[derived(v)])


@register("Concat", "movement", min_rank=1, specials_ok=True)
def _concat(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    parts = [v]
    for _ in range(g.chooser.integer(1, 2)):
        shape = list(v.shape)
        shape[axis] = g.chooser.integer(0 if g.chooser.boolean(0.1) else 1, 3)
        parts.append(g.operand(v.dtype, tuple(shape)))
    turn = g.chooser.integer(0, len(parts) - 1)
    parts = parts[turn:] + parts[:turn]
    return g.node("Concat", parts, {"axis": axis}, [_union(parts)])


def _union(parts: list[Value]) -> Facts:
    return {"lo": min(p.lo for p in parts), "hi": max(p.hi for p in parts), "finite": all(p.finite for p in parts),
            "tol": max(p.tol for p in parts)}


@register("Split", "movement", min_rank=1, specials_ok=True)
def _split(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    n = v.shape[axis]
    if n == 0:
        raise Reject("split of an empty axis")
    form = g.chooser.choice(("sizes", "equal", "num_outputs"))
    if form == "sizes":
        cuts = sorted({g.chooser.integer(0, n) for _ in range(g.chooser.integer(1, 2))})
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, n])]
        if g.opset < 13:
            return g.node("Split", [v], {"axis": axis, "split": sizes}, [derived(v)] * len(sizes))
        return g.node("Split", [v, g.ints(sizes)], {"axis": axis}, [derived(v)] * len(sizes))
    if form == "num_outputs" and g.opset >= 18:
        count = g.chooser.integer(1, min(n, 3))
        chunk = -(-n // count)
        count = -(-n // chunk)  # ONNX: as many chunks of ceil(n / count) as fit
        return g.node("Split", [v], {"axis": axis, "num_outputs": count}, [derived(v)] * count)
    divisors = [d for d in (1, 2, 3) if n % d == 0]
    count = g.chooser.choice(divisors)
    return g.node("Split", [v], {"axis": axis}, [derived(v)] * count)


@register("Slice", "movement", min_rank=1)
def _slice(g: GraphBuilder, v: Value) -> list[Value]:
    axes = pick_axes(g, v)
    starts, ends, steps = [], [], []
    for a in axes:
        n = v.shape[a]
        step = g.chooser.choice((1, 1, 1, 2, -1, -2))
        start = g.chooser.integer(-n - 2, n + 1)
        # "to the end" sentinels; INT64_MAX with a negative step is avoided: onnxruntime then returns
        # the first element where ONNX (and its reference) return nothing
        end = g.chooser.choice((g.chooser.integer(-n - 2, n + 2), 2**63 - 1 if step > 0 else -(2**63)))
        starts.append(start)
        ends.append(end)
        steps.append(step)
    inputs = [v, g.ints(starts), g.ints(ends)]
    if g.chooser.boolean(0.8) or any(s != 1 for s in steps) or axes != list(range(len(axes))):
        inputs.append(g.ints(axes))
        if g.chooser.boolean(0.8) or any(s != 1 for s in steps):
            inputs.append(g.ints(steps))
    return g.node("Slice", inputs, outputs=[derived(v)])


@register("Expand", "movement", min_opset=8)
def _expand(g: GraphBuilder, v: Value) -> list[Value]:
    target = list(partner_shape(g, v.shape))
    target = [1 if d == t and g.chooser.boolean(0.2) else t
              for d, t in zip((0,) * (len(target) - v.rank) + v.shape, target)]  # 1 keeps the input's dim
    return g.node("Expand", [v, g.ints(target)], outputs=[derived(v)])


@register("Tile", "movement", min_rank=1)
def _tile(g: GraphBuilder, v: Value) -> list[Value]:
    reps = [g.chooser.choice((1, 1, 2, 3)) for _ in v.shape]
    if v.size * math.prod(reps) > g.max_elements:
        raise Reject("tile too large")
    return g.node("Tile", [v, g.ints(reps)], outputs=[derived(v)])


@register("Pad", "movement", min_rank=1, dtypes=tuple(d for d in ALL_DTYPES if d not in ("int16", "uint16")))
def _pad(g: GraphBuilder, v: Value) -> list[Value]:
    modes = ("constant", "constant", "reflect", "edge") + (("wrap",) if g.opset >= 19 else ())
    mode = g.chooser.choice(modes)
    axes = list(range(v.rank)) if g.opset < 18 or g.chooser.boolean(0.5) else sorted(
        a % v.rank for a in pick_axes(g, v))
    begins, ends = [], []
    for a in axes:
        n = v.shape[a]
        top = n - 1 if mode == "reflect" else (n if mode == "wrap" else 2)
        if n == 0 and mode != "constant":
            raise Reject(f"{mode} padding of an empty axis")
        low = -min(n - 1, 1) if mode == "constant" and n > 1 else 0  # cropping pads are valid
        begins.append(g.chooser.integer(low, max(top, 0)))
        ends.append(g.chooser.integer(low, max(top, 0)))
    inputs: list[Value | None] = [v, g.ints(begins + ends)]
    lo, hi = v.lo, v.hi
    if mode == "constant" and g.chooser.boolean(0.6):
        fill = g.random_data(v.dtype, (1,)).reshape(())
        inputs.append(g.scalar(fill.item(), v.dtype))
        lo, hi = min(lo, float(fill)), max(hi, float(fill))
    elif mode == "constant":
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if len(axes) != v.rank:
        while len(inputs) < 3:
            inputs.append(None)
        inputs.append(g.ints(axes))
    fact = derived(v, lo=lo, hi=hi)
    return g.node("Pad", inputs, {"mode": mode}, [fact])


@register("Shape", "movement", specials_ok=True)
def _shape(g: GraphBuilder, v: Value) -> list[Value]:
    attrs = {}
    if g.opset >= 15 and v.rank and g.chooser.boolean(0.5):
        attrs = {"start": g.chooser.integer(-v.rank, v.rank - 1), "end": g.chooser.integer(-v.rank, v.rank)}
    top = max(v.shape, default=0)
    return g.node("Shape", [v], attrs, [{"lo": 0, "hi": top, "finite": True}])


@register("Size", "movement", specials_ok=True)
def _size(g: GraphBuilder, v: Value) -> list[Value]:
    return g.node("Size", [v], outputs=[{"lo": v.size, "hi": v.size, "finite": True}])


@register("ConstantOfShape", "movement", specials_ok=True, min_opset=9)
def _constant_of_shape(g: GraphBuilder, v: Value) -> list[Value]:
    """Filled to the shape of `v` (Shape, then ConstantOfShape)."""
    shape = g.node("Shape", [v], outputs=[{"lo": 0, "hi": max(v.shape, default=0), "finite": True}])[0]
    dtype = g.chooser.choice(("float32", "int64", "int32", "bool", "float64"))
    fill = g.random_data(dtype, (1,))
    attrs = {} if g.chooser.boolean(0.2) else {"value": numpy_helper.from_array(fill)}
    value = 0.0 if not attrs else float(fill[0])
    return g.node("ConstantOfShape", [shape], attrs, [{"lo": value, "hi": value, "finite": True}])


def _block_input(g: GraphBuilder, v: Value, bs: int, to_space: bool) -> Value:
    """`v` reshaped to a 4-D (N, C, H, W) that suits the block size."""
    if v.rank == 4 and ((to_space and v.shape[1] % (bs * bs) == 0) or
                        (not to_space and v.shape[2] % bs == 0 and v.shape[3] % bs == 0)):
        return v
    if v.size == 0 or v.size % (bs * bs):
        raise Reject("size does not fit the block size")
    rest = v.size // (bs * bs)
    shape = [1, bs * bs * rest, 1, 1] if to_space else [1, rest, bs, bs]
    return reshaped(g, v, shape)


@register("DepthToSpace", "movement", dtypes=BLOCK_DTYPES)
def _depth_to_space(g: GraphBuilder, v: Value) -> list[Value]:
    bs = g.chooser.choice((1, 2))
    x = _block_input(g, v, bs, True)
    attrs = {"blocksize": bs, "mode": g.chooser.choice(("DCR", "CRD"))}
    return g.node("DepthToSpace", [x], attrs, [derived(v)])


@register("SpaceToDepth", "movement", dtypes=BLOCK_DTYPES)
def _space_to_depth(g: GraphBuilder, v: Value) -> list[Value]:
    bs = g.chooser.choice((1, 2))
    x = _block_input(g, v, bs, False)
    return g.node("SpaceToDepth", [x], {"blocksize": bs}, [derived(v)])


@register("Trilu", "movement", min_rank=2, min_opset=14, dtypes=("float32", "float64", "int32", "int64", "bool"))
def _trilu(g: GraphBuilder, v: Value) -> list[Value]:
    inputs = [v]
    if g.chooser.boolean(0.7):
        inputs.append(g.scalar(g.chooser.integer(-3, 3), "int64"))
    fact = derived(v, lo=min(v.lo, 0.0), hi=max(v.hi, 0.0))
    return g.node("Trilu", inputs, {"upper": g.chooser.choice((0, 1))}, [fact])


@register("ReverseSequence", "movement", min_rank=2, min_opset=10)
def _reverse_sequence(g: GraphBuilder, v: Value) -> list[Value]:
    batch_axis = g.chooser.choice((0, 1))
    time_axis = 1 - batch_axis
    steps = v.shape[time_axis]
    lens = g.rng.integers(0 if g.chooser.boolean(0.2) or steps == 0 else 1, steps + 1, size=v.shape[batch_axis])
    seq = g.constant(np.asarray(lens, dtype=np.int64), reusable=False)
    return g.node("ReverseSequence", [v, seq], {"batch_axis": batch_axis, "time_axis": time_axis}, [derived(v)])


@register("EyeLike", "movement", min_opset=9, dtypes=EYE_DTYPES)
def _eye_like(g: GraphBuilder, v: Value) -> list[Value]:
    x = v if v.rank == 2 else reshaped(g, v, [1, v.size] if g.chooser.boolean() else [v.size, 1])
    attrs: dict[str, object] = {"k": g.chooser.integer(-2, 2)}
    if g.chooser.boolean(0.5):
        attrs["dtype"] = g.chooser.choice((1, 7, 6, 11, 13))  # float, int64, int32, double, uint64
    return g.node("EyeLike", [x], attrs, [{"lo": 0.0, "hi": 1.0, "finite": True}])


@register("Range", "movement", min_opset=11, specials_ok=True)
def _range(g: GraphBuilder, v: Value) -> list[Value]:
    """A Range of constant scalars (it starts a new branch; `v` is not used)."""
    dtype = g.chooser.choice(("float32", "int64", "int32", "float64"))
    n = g.chooser.integer(1, 6)
    step = g.chooser.choice((1, 2, -1, 0.5) if dtype.startswith("float") else (1, 2, -1, -3))
    start = g.chooser.integer(-4, 4)
    limit = start + step * n - (0.25 if dtype.startswith("float") else 0) * (1 if step > 0 else -1)
    args = [g.scalar(start, dtype), g.scalar(limit, dtype), g.scalar(step, dtype)]
    lo, hi = sorted((float(start), float(start + step * (n - 1))))
    return g.node("Range", args, outputs=[{"lo": lo, "hi": hi, "finite": True}])

