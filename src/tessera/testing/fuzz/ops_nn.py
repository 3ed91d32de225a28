"""Generators for convolutions, pooling, matrix products and Resize.

The primary input is reshaped to (N, C, spatial...) when its rank does not
fit. Window attributes (kernel, strides, dilations, pads, auto_pad,
ceil_mode) are drawn so that every output extent is at least 1. Accumulating
operators get a rounding allowance that grows with the reduction length.
"""

from __future__ import annotations

import math

import numpy as np

from .graph import FLOATS, GraphBuilder, Reject, Value, derived
from .ops_movement import factorize, reshaped
from .spec import exact_or, register


F32 = ("float32",)  # onnxruntime runs these for float32 only


def as_spatial(g: GraphBuilder, v: Value, ranks: tuple[int, ...] = (1, 2, 3)) -> Value:
    """`v` as an (N, C, spatial...) tensor with d spatial dims, d in `ranks`."""
    if v.rank - 2 in ranks and v.size:
        return v
    if v.size == 0:
        raise Reject("empty input")
    d = g.chooser.choice(ranks)
    dims = factorize(g, v.size, d + 2)
    return reshaped(g, v, dims)


def _window(g: GraphBuilder, extent: int, max_kernel: int = 3) -> tuple[int, int, int, int, int]:
    """(kernel, stride, dilation, pad_begin, pad_end) giving at least one output."""
    for _ in range(8):
        k = g.chooser.integer(1, max_kernel)
        s = g.chooser.choice((1, 1, 2))
        dil = g.chooser.choice((1, 1, 2))
        pb, pe = g.chooser.integer(0, k - 1), g.chooser.integer(0, k - 1)
        if extent + pb + pe >= dil * (k - 1) + 1:
            return k, s, dil, pb, pe
    raise Reject("no window fits")


def _window_attrs(g: GraphBuilder, x: Value, dilations_ok: bool = True) -> tuple[dict[str, object], list[int]]:
    spatial = x.shape[2:]
    wins = [_window(g, e) for e in spatial]
    kernel = [w[0] for w in wins]
    attrs: dict[str, object] = {"kernel_shape": kernel, "strides": [w[1] for w in wins]}
    if not dilations_ok:
        wins = [(k, s, 1, pb, pe) for k, s, _, pb, pe in wins]
    elif g.chooser.boolean(0.7):
        attrs["dilations"] = [w[2] for w in wins]
    mode = g.chooser.choice(("NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"))
    if mode == "NOTSET":
        attrs["pads"] = [w[3] for w in wins] + [w[4] for w in wins]
    else:
        attrs["auto_pad"] = mode
        if mode == "VALID" and any(e < w[2] * (w[0] - 1) + 1 for e, w in zip(spatial, wins)):
            raise Reject("VALID window larger than the input")
        if mode != "VALID" and any(d != 1 for d in attrs.get("dilations", ())):  # type: ignore[attr-defined]
            raise Reject("onnxruntime does not implement SAME padding with dilations")
    return attrs, kernel


@register("Conv", "nn", dtypes=F32)
def _conv(g: GraphBuilder, v: Value) -> list[Value]:
    x = as_spatial(g, v)
    c = x.shape[1]
    group = g.chooser.choice([d for d in (1, 1, 2, 3, c) if c % d == 0])
    m = group * g.chooser.integer(1, 2)
    attrs, kernel = _window_attrs(g, x)
    if group > 1:
        attrs["group"] = group
    w = g.leaf(x.dtype, (m, c // group, *kernel), lo=-1, hi=1)
    inputs = [x, w]
    if g.chooser.boolean(0.5):
        inputs.append(g.leaf(x.dtype, (m,), lo=-1, hi=1))
    k = c // group * math.prod(kernel)
    bound = k * x.magnitude + 1
    return g.node("Conv", inputs, attrs, [{"lo": -bound, "hi": bound, "finite": x.finite,
                                           "tol": exact_or(x.dtype, [x, w], 2 * k + 4)}])


@register("ConvTranspose", "nn", dtypes=F32)
def _conv_transpose(g: GraphBuilder, v: Value) -> list[Value]:
    x = as_spatial(g, v, (1, 2))
    c = x.shape[1]
    group = g.chooser.choice([d for d in (1, 1, 2, c) if c % d == 0])
    m = g.chooser.integer(1, 2)
    d = x.rank - 2
    kernel = [g.chooser.integer(1, 3) for _ in range(d)]
    strides = [g.chooser.choice((1, 2)) for _ in range(d)]
    dilations = [g.chooser.choice((1, 1, 2)) for _ in range(d)]
    attrs: dict[str, object] = {"kernel_shape": kernel, "strides": strides, "dilations": dilations}
    if group > 1:
        attrs["group"] = group
    if g.chooser.boolean(0.5):
        attrs["pads"] = [g.chooser.integer(0, k - 1) for k in kernel] * 2
    if g.chooser.boolean(0.3):
        attrs["output_padding"] = [g.chooser.integer(0, max(s, dl) - 1) for s, dl in zip(strides, dilations)]
    pads = attrs.get("pads", [0] * 2 * d)
    out_pad = attrs.get("output_padding", [0] * d)
    for k in range(d):  # (in - 1) * stride + dilation * (kernel - 1) + 1 + output_padding - pads
        extent = (x.shape[2 + k] - 1) * strides[k] + dilations[k] * (kernel[k] - 1) + 1 + out_pad[k]  # type: ignore[index]
        if extent - pads[k] - pads[k + d] < 1:  # type: ignore[index]
            raise Reject("transposed convolution with no output")
    w = g.leaf(x.dtype, (c, m, *kernel), lo=-1, hi=1)
    inputs = [x, w] + ([g.leaf(x.dtype, (m * group,), lo=-1, hi=1)] if g.chooser.boolean(0.5) else [])
    k = c // group * math.prod(kernel)
    bound = k * x.magnitude + 1
    return g.node("ConvTranspose", inputs, attrs, [{"lo": -bound, "hi": bound, "finite": x.finite,
                                                    "tol": exact_or(x.dtype, [x, w], 2 * k + 4)}])


def _pool(op: str, dtypes: tuple[str, ...]) -> None:
    @register(op, "nn", dtypes=dtypes)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        x = as_spatial(g, v)
        attrs, kernel = _window_attrs(g, x, op == "MaxPool" or g.opset >= 19)  # others: dilations from 19
        if g.opset >= (18 if op == "LpPool" else 10) and g.chooser.boolean(0.3):
            attrs["ceil_mode"] = 1
        k = math.prod(kernel)
        fact = derived(x)
        if op == "AveragePool":
            attrs["count_include_pad"] = g.chooser.choice((0, 1))
            fact = derived(x, lo=min(x.lo, 0.0), hi=max(x.hi, 0.0), tol=exact_or(x.dtype, [x], k + 4))
        elif op == "LpPool":
            p = g.chooser.choice((1, 2, 3))
            attrs["p"] = p
            fact = {"lo": 0.0, "hi": k * x.magnitude, "finite": x.finite,
                    "tol": exact_or(x.dtype, [x], k + 64, amp=float(p))}
        outputs = [fact]
        if op == "MaxPool" and g.chooser.boolean(0.2) and x.dtype in FLOATS:
            outputs.append({"lo": 0, "hi": x.size, "finite": True})  # flat indices of the maxima
        return g.node(op, [x], attrs, outputs)


_pool("MaxPool", FLOATS + ("int8", "uint8"))
_pool("AveragePool", F32)
_pool("LpPool", F32)


def _global_pool(op: str) -> None:
    @register(op, "nn", dtypes=F32)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        x = as_spatial(g, v)
        k = math.prod(x.shape[2:])
        if op == "GlobalMaxPool":
            fact = derived(x)
            attrs: dict[str, object] = {}
        elif op == "GlobalAveragePool":
            fact = derived(x, tol=exact_or(x.dtype, [x], k + 4))
            attrs = {}
        else:
            attrs = {"p": g.chooser.choice((1, 2, 3))}
            fact = {"lo": 0.0, "hi": k * x.magnitude, "finite": x.finite, "tol": exact_or(x.dtype, [x], k + 64, 3)}
        return g.node(op, [x], attrs, [fact])


for _op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
    _global_pool(_op)


# --------------------------------------------------------- matrix products
def _product_fact(a: Value, b: Value, k: int) -> dict[str, object]:
    bound = max(k, 1) * a.magnitude * b.magnitude
    return {"lo": -bound, "hi": bound, "finite": a.finite and b.finite,
            "tol": exact_or(a.dtype, [a, b], 2 * k + 4 if k > 1 else 1)}


@register("MatMul", "nn", dtypes=FLOATS + ("int32", "int64"), min_rank=1, max_rank=4)
def _matmul(g: GraphBuilder, v: Value) -> list[Value]:
    k = v.shape[-1]
    n = g.chooser.integer(1, 4)
    form = g.chooser.choice(("matrix", "vector", "batched"))
    if form == "vector":
        shape: tuple[int, ...] = (k,)
    elif form == "batched" and v.rank >= 3:
        batch = tuple(1 if g.chooser.boolean(0.3) else d for d in v.shape[:-2])
        shape = batch + (k, n)
    else:
        shape = (k, n)
    small = {"lo": -3, "hi": 3} if v.dtype.startswith("int") else {"lo": -1, "hi": 1}
    other = g.leaf(v.dtype, shape, **small)
    a, b = v, other
    if v.rank >= 2 and g.chooser.boolean(0.3):  # v on the right: (m, v.shape[-2])
        m = g.chooser.integer(1, 3)
        a = g.leaf(v.dtype, (m, v.shape[-2]), **small)
        b = v
        k = v.shape[-2]
    return g.node("MatMul", [a, b], outputs=[_product_fact(a, b, k)])


@register("Gemm", "nn", dtypes=FLOATS)
def _gemm(g: GraphBuilder, v: Value) -> list[Value]:
    a = v if v.rank == 2 else reshaped(g, v, factorize(g, v.size, 2) if v.size else [0, 1])
    trans_a, trans_b = g.chooser.choice((0, 1)), g.chooser.choice((0, 1))
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = g.chooser.integer(1, 4)
    b = g.leaf(a.dtype, (n, k) if trans_b else (k, n), lo=-1, hi=1)
    attrs: dict[str, object] = {"transA": trans_a, "transB": trans_b}
    inputs = [a, b]
    if g.chooser.boolean(0.6):
        inputs.append(g.leaf(a.dtype, g.chooser.choice(((m, n), (n,), (1, n), (m, 1), ())), lo=-1, hi=1))
        if g.chooser.boolean(0.4):
            attrs["beta"] = g.chooser.choice((0.5, 2.0, 0.0))
    if g.chooser.boolean(0.4):
        attrs["alpha"] = g.chooser.choice((0.5, 2.0, -1.0))
    fact = _product_fact(a, b, k)
    fact["lo"], fact["hi"] = -3 * float(fact["hi"]) - 3, 3 * float(fact["hi"]) + 3  # type: ignore[arg-type]
    fact["tol"] = exact_or(a.dtype, inputs, 2 * k + 6)
    return g.node("Gemm", inputs, attrs, [fact])


# ------------------------------------------------------------------ resize
@register("Resize", "nn", dtypes=FLOATS[:1], min_rank=1, max_rank=4, min_opset=13)
def _resize(g: GraphBuilder, v: Value) -> list[Value]:
    mode = g.chooser.choice(("nearest", "linear", "cubic"))
    attrs: dict[str, object] = {"mode": mode}
    coordinate = g.chooser.choice(("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"))
    attrs["coordinate_transformation_mode"] = coordinate
    if mode == "nearest":
        attrs["nearest_mode"] = g.chooser.choice(("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))
    elif mode == "cubic" and g.chooser.boolean(0.3):
        attrs["cubic_coeff_a"] = -0.5
    resized = [a for a in range(v.rank) if g.chooser.boolean(0.6) or a >= v.rank - 2]
    scales = [1.0] * v.rank
    for a in resized:
        scales[a] = g.chooser.choice((0.5, 1.0, 1.5, 2.0, 3.0))
    out = [int(math.floor(d * s)) for d, s in zip(v.shape, scales)]
    if math.prod(out) > g.max_elements or 0 in out:
        raise Reject("resize output too large or empty")
    if mode == "cubic" and coordinate == "pytorch_half_pixel" and any(out[a] == 1 for a in resized):
        raise Reject("onnxruntime departs from ONNX for cubic pytorch_half_pixel resizes to one pixel")
    # roi (unused without tf_crop_and_resize): left out, or an empty tensor
    roi_input = g.constant(np.zeros(0, dtype=np.float32), reusable=False) if g.chooser.boolean(0.5) else None
    if g.chooser.boolean(0.5):
        inputs = [v, roi_input, g.constant(np.asarray(scales, dtype=np.float32), reusable=False)]
    else:
        inputs = [v, roi_input, None, g.ints(out)]
    if mode == "nearest":
        fact = derived(v)
    else:
        m = v.magnitude * (2.0 if mode == "cubic" else 1.0)
        fact = derived(v, lo=-m, hi=m, tol=exact_or(v.dtype, [v], 64, amp=4.0))
    return g.node("Resize", inputs, attrs, [fact])
