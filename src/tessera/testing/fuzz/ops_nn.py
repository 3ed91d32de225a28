"""Generators for convolutions, pooling, matrix products and Resize.

The primary input is reshaped to (N, C, spatial...) when its rank does not
fit. Window attributes (kernel, strides, dilations, pads, auto_pad,
ceil_mode) are drawn so that every output extent is at least 1. Accumulating
operators get a rounding allowance that grows with the reduction length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .graph import FLOATS, Facts, GraphBuilder, Reject, Value, derived
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


@dataclass(frozen=True)
class Window:
    """One spatial axis of a sliding window."""

    kernel: int
    stride: int
    dilation: int
    begin: int  # padding
    end: int

    def outputs(self, extent: int, ceil: bool) -> int:
        span = extent + self.begin + self.end - self.dilation * (self.kernel - 1) - 1
        if span < 0:
            return 0
        count = (-(-span // self.stride) if ceil else span // self.stride) + 1
        if ceil and (count - 1) * self.stride >= extent + self.begin:
            count -= 1  # a last window that would start in the end padding is dropped
        return count

    def all_read_input(self, extent: int, ceil: bool) -> bool:
        """Every window holds an input element (a max or average over padding alone is undefined)."""
        taps = range(0, self.kernel * self.dilation, self.dilation)
        count = self.outputs(extent, ceil)
        return count > 0 and all(any(0 <= o * self.stride - self.begin + t < extent for t in taps)
                                 for o in range(count))


def _same_padding(extent: int, kernel: int, stride: int, upper: bool) -> tuple[int, int]:
    total = max(0, (-(-extent // stride) - 1) * stride + kernel - extent)
    small, large = total // 2, total - total // 2
    return (small, large) if upper else (large, small)


def _window_attrs(g: GraphBuilder, x: Value, dilations_ok: bool = True, ceil_ok: bool = False,
                  pool: bool = False) -> tuple[dict[str, object], list[int]]:
    """Window attributes over x's spatial axes; pools get windows that all read the input."""
    mode = g.chooser.choice(("NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"))
    # SAME with ceil_mode: ONNX shape inference and the ONNX reference disagree on the output size
    ceil = ceil_ok and mode == "NOTSET" and g.chooser.boolean(0.3)
    windows = []
    for extent in x.shape[2:]:
        for _ in range(8):
            k, s = g.chooser.integer(1, 3), g.chooser.choice((1, 1, 2))
            dil = g.chooser.choice((1, 1, 2)) if dilations_ok and mode in ("NOTSET", "VALID") else 1
            if mode == "NOTSET":
                pads = (g.chooser.integer(0, k - 1), g.chooser.integer(0, k - 1))
            elif mode == "VALID":
                pads = (0, 0)
            else:  # onnxruntime implements SAME padding without dilations only
                pads = _same_padding(extent, k, s, mode == "SAME_UPPER")
            w = Window(k, s, dil, *pads)
            if w.all_read_input(extent, ceil) if pool else w.outputs(extent, ceil) > 0:
                windows.append(w)
                break
        else:
            raise Reject("no window fits")
    attrs: dict[str, object] = {"kernel_shape": [w.kernel for w in windows], "strides": [w.stride for w in windows]}
    if any(w.dilation != 1 for w in windows) or (dilations_ok and g.chooser.boolean(0.3)):
        attrs["dilations"] = [w.dilation for w in windows]
    if mode == "NOTSET":
        attrs["pads"] = [w.begin for w in windows] + [w.end for w in windows]
    else:
        attrs["auto_pad"] = mode
    if ceil:
        attrs["ceil_mode"] = 1
    return attrs, [w.kernel for w in windows]


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
    pads, out_pad = [0] * 2 * d, [0] * d
    if g.chooser.boolean(0.5):
        pads = [g.chooser.integer(0, k - 1) for k in kernel] * 2
        attrs["pads"] = pads
    if g.chooser.boolean(0.3):
        # ONNX allows up to max(stride, dilation) - 1; onnxruntime only stride - 1
        out_pad = [g.chooser.integer(0, s - 1) for s in strides]
        attrs["output_padding"] = out_pad
    for k in range(d):  # (in - 1) * stride + dilation * (kernel - 1) + 1 + output_padding - pads
        extent = (x.shape[2 + k] - 1) * strides[k] + dilations[k] * (kernel[k] - 1) + 1 + out_pad[k]
        if extent - pads[k] - pads[k + d] < 1:
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
        attrs, kernel = _window_attrs(g, x, dilations_ok=op == "MaxPool" or g.opset >= 19,  # others: from 19
                                      ceil_ok=g.opset >= (18 if op == "LpPool" else 10), pool=True)
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
def _product_fact(a: Value, b: Value, k: int) -> Facts:
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
    lo, hi = (-3, 3) if v.dtype.startswith("int") else (-1, 1)
    other = g.leaf(v.dtype, shape, lo=lo, hi=hi)
    a, b = v, other
    if v.rank >= 2 and g.chooser.boolean(0.3):  # v on the right: (m, v.shape[-2])
        m = g.chooser.integer(1, 3)
        a = g.leaf(v.dtype, (m, v.shape[-2]), lo=lo, hi=hi)
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
    fact["lo"], fact["hi"] = -3 * fact["hi"] - 3, 3 * fact["hi"] + 3
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
    if mode != "nearest" and v.rank not in (2, 4):
        raise Reject("onnxruntime interpolates 2-d and 4-d (NCHW) inputs only")
    resized = [a for a in range(v.rank) if a >= v.rank - 2 or (mode == "nearest" and g.chooser.boolean(0.6))]
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
    exact_sizes = all(float(d * s).is_integer() for d, s in zip(v.shape, scales))
    # align_corners with scales whose sizes round down: onnxruntime maps with 1/scale, ONNX with the lengths
    if g.chooser.boolean(0.5) and (exact_sizes or coordinate != "align_corners"):
        inputs = [v, roi_input, g.constant(np.asarray(scales, dtype=np.float32), reusable=False)]
    else:
        inputs = [v, roi_input, None, g.ints(out)]
    if mode == "nearest":
        fact = derived(v)
    else:
        m = v.magnitude * (2.0 if mode == "cubic" else 1.0)
        fact = derived(v, lo=-m, hi=m, tol=exact_or(v.dtype, [v], 64, amp=4.0))
    return g.node("Resize", inputs, attrs, [fact])
