"""Resize and Upsample.

Resizing is separable: each resized axis is an independent 1-D resampling,
whose source positions and weights depend only on static sizes and the
constant scales/sizes/roi. They are computed here, at import time, with the
formulas of the ONNX reference implementation, and become constant tables:

* nearest: a `take` of the chosen source index per output position (exact);
* linear / cubic (with antialias, exclude_outside, extrapolation): a
  `resample` (weighted taps, accumulated in float64) per axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ....op import transform_gather as tg
from ....op import transform_resize as tr
from ....relay.expr import Constant, Expr
from ..importer import ImportContext, Node
from ..registry import converter
from .common import ints

Coeffs = Callable[[float, float], np.ndarray]  # (ratio in (0, 1], scale) -> tap weights

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize")
LEGACY_COORDINATE_MODES = ("tf_half_pixel_for_nn",)  # opsets 11 and 12 only
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


# ------------------------------------------------------ tap weights (ONNX reference)
def _nearest_coeffs(mode: str) -> Coeffs:
    rules = {
        "round_prefer_floor": lambda r, scale: [r <= 0.5, r > 0.5],
        "round_prefer_ceil": lambda r, scale: [r < 0.5, r >= 0.5],
        "floor": lambda r, scale: [1, 0],
        "ceil": lambda r, scale: [0, 1],
        # opset 10 (no nearest_mode yet), as onnxruntime runs it: ceil when downsampling, else floor
        "simple": lambda r, scale: [0, 1] if scale < 1 else [1, 0],
    }
    rule = rules[mode]
    return lambda r, scale: np.array([0, 1] if float(r).is_integer() else rule(r, scale), dtype=np.float64)


def _linear_coeffs(antialias: bool) -> Coeffs:
    def plain(r: float, scale: float) -> np.ndarray:
        return np.array([1 - r, r])

    def smooth(r: float, scale: float) -> np.ndarray:
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - r) * scale
        coeffs = np.clip(1 - np.abs(args), 0, 1)
        return coeffs / coeffs.sum()

    return smooth if antialias else plain


def _cubic_coeffs(a: float, antialias: bool) -> Coeffs:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return ((a + 2) * x - (a + 3)) * x * x + 1
        if x < 2:
            return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return 0.0

    def plain(r: float, scale: float) -> np.ndarray:
        return np.array([
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
            ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a,
        ])

    def smooth(r: float, scale: float) -> np.ndarray:
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        coeffs = np.array([kernel(scale * (i - r)) for i in range(start, 2 - start)])
        return coeffs / coeffs.sum()

    return smooth if antialias else plain


# ----------------------------------------------------------- one axis
@dataclass(frozen=True)
class AxisResize:
    """What one axis needs: sizes, scale, coordinate mode and roi."""

    n_in: int
    n_out: int
    scale: float
    coordinate_mode: str
    roi: tuple[float, float] | None


def source_coordinates(a: AxisResize) -> tuple[np.ndarray, np.ndarray]:
    """Input coordinate of every output position, and which ones are extrapolated."""
    y = np.arange(a.n_out, dtype=np.float64)
    width = a.scale * a.n_in  # the real-valued output width
    outside = np.zeros(a.n_out, dtype=bool)
    mode = a.coordinate_mode
    if mode == "align_corners":
        x = np.zeros(a.n_out) if width == 1 else y * (a.n_in - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / a.scale
    elif mode == "tf_crop_and_resize":
        lo, hi = a.roi if a.roi is not None else (0.0, 1.0)
        x = np.full(a.n_out, (hi - lo) * (a.n_in - 1) / 2) if width == 1 \
            else y * (hi - lo) * (a.n_in - 1) / (width - 1)
        x = x + lo * (a.n_in - 1)
        outside = (x < 0) | (x > a.n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(a.n_out, -0.5) if width == 1 else (y + 0.5) / a.scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / a.scale - 0.5
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / a.scale
    else:  # half_pixel_symmetric
        offset = a.n_in / 2 * (1 - a.n_out / width)
        x = offset + (y + 0.5) / a.scale - 0.5
    return x, outside


def axis_tables(a: AxisResize, coeffs_of: Coeffs, exclude_outside: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices, weights, outside): (n_out, taps) source indices (clamped) and weights."""
    x, outside = source_coordinates(a)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)  # in (0, 1]: prefer the left neighbour
    weights = np.stack([np.asarray(coeffs_of(float(r), a.scale), dtype=np.float64) for r in ratios]) \
        if a.n_out else np.zeros((0, len(coeffs_of(1.0, a.scale))))
    taps = weights.shape[1]
    # the `taps` neighbours nearest to x, ties to the smaller index
    half = int(np.ceil(taps / 2))
    padded = x + half
    base = np.floor(padded).astype(np.int64)
    frac = padded - base
    if taps % 2 == 0:
        offset = np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((taps - 1) // 2), -((taps - 1) // 2) + 1)
    neighbours = (base + offset)[:, None] + np.arange(taps)[None, :] - half
    if exclude_outside:
        weights = np.where((neighbours < 0) | (neighbours >= a.n_in), 0.0, weights)
        total = weights.sum(axis=-1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(neighbours, 0, a.n_in - 1), weights, outside


def is_identity(a: AxisResize) -> bool:
    """The reference skips an axis that keeps its size at scale ~1 with the full roi."""
    full_roi = a.roi is None or (math.isclose(a.roi[0], 0.0) and math.isclose(a.roi[1], 1.0))
    return math.isclose(a.scale, 1.0) and a.n_out == a.n_in and full_roi


# ------------------------------------------------------------ lowering
@dataclass(frozen=True)
class ResizeSpec:
    mode: str
    coeffs: Coeffs
    exclude_outside: bool
    fill_value: float


def resize_axes(x: Expr, dtype: str, axes: Sequence[tuple[int, AxisResize]], spec: ResizeSpec) -> Expr:
    """Resample each axis in turn; linear/cubic axes chain in float64."""
    tables = [(k, a.n_out, *axis_tables(a, spec.coeffs, spec.exclude_outside))
              for k, a in axes if not is_identity(a)]
    gathers = [_is_gather(spec, w, outside) for _, _, _, w, outside in tables]
    last_resample = max((n for n, g in enumerate(gathers) if not g), default=-1)
    for n, (k, n_out, idx, w, outside) in enumerate(tables):
        if gathers[n]:
            x = tg.take(x, Constant(idx[np.arange(n_out), np.argmax(w, axis=1)].astype(np.int64)), axis=k)
            continue
        idx = np.where(outside[:, None], -1, idx).astype(np.int32)
        x = tr.resample(x, Constant(idx), Constant(w), axis=k,
                        out_dtype=dtype if n == last_resample else tr.ACC, fill_value=spec.fill_value)
    return x


def _is_gather(spec: ResizeSpec, weights: np.ndarray, outside: np.ndarray) -> bool:
    """Does every output copy exactly one input element (nearest, nothing extrapolated)?"""
    one_hot = np.all((weights == 0) | (weights == 1), axis=1) & (weights.sum(axis=1) == 1)
    return spec.mode == "nearest" and bool(one_hot.all()) and not outside.any()


def _scales_or_sizes(node: Node, ctx: ImportContext, axes: tuple[int, ...],
                     scales: np.ndarray | None, sizes: np.ndarray | None) -> tuple[list[float], list[int]]:
    """Per resized axis: (scale, output size), as the reference derives them."""
    shape = ctx.shape_of(node.input(0))
    n_in = [shape[k] for k in axes]
    if sizes is not None:
        if sizes.size != len(axes):
            raise node.error(f"sizes needs {len(axes)} values, got {sizes.size}")
        out = [int(v) for v in sizes]
        scale = [o / i if i else 1.0 for o, i in zip(out, n_in)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy not in ASPECT_POLICIES:
            raise node.error(f"keep_aspect_ratio_policy={policy!r} is not valid; expected one of {ASPECT_POLICIES}")
        if policy != "stretch":
            s = min(scale) if policy == "not_larger" else max(scale)
            scale = [s] * len(axes)
            out = [int(s * i + 0.5) for i in n_in]
        return scale, out
    if scales is None:
        raise node.error("one of scales and sizes must be given")
    if scales.size != len(axes):
        raise node.error(f"scales needs {len(axes)} values, got {scales.size}")
    scale = [float(v) for v in scales]
    if any(s <= 0 for s in scale):
        raise node.error(f"scales must be positive, got {scale}")
    return scale, [int(s * i) for s, i in zip(scale, n_in)]


def _optional_constant(node: Node, ctx: ImportContext, k: int, what: str) -> np.ndarray | None:
    e = node.optional_input(k)
    if e is None:
        return None
    value = ctx.constant(e, what)
    return value if value.size else None


def _spec(node: Node, mode: str, nearest_mode: str, antialias: bool) -> ResizeSpec:
    if mode not in MODES:
        raise node.error(f"mode={mode!r} is not valid; expected one of {', '.join(MODES)}")
    if mode == "nearest" and nearest_mode not in NEAREST_MODES + ("simple",):
        raise node.error(f"nearest_mode={nearest_mode!r} is not valid; expected one of {', '.join(NEAREST_MODES)}")
    if mode == "nearest" and antialias:
        raise node.error("antialias=1 is not valid with mode='nearest'")
    table = {
        "nearest": lambda: _nearest_coeffs(nearest_mode),
        "linear": lambda: _linear_coeffs(antialias),
        "cubic": lambda: _cubic_coeffs(float(node.attr("cubic_coeff_a", -0.75)), antialias),
    }
    return ResizeSpec(mode, table[mode](), bool(node.attr("exclude_outside", 0)),
                      float(node.attr("extrapolation_value", 0.0)))


def _resize(node: Node, ctx: ImportContext, spec: ResizeSpec, coordinate_mode: str,
            scales: np.ndarray | None, sizes: np.ndarray | None, roi: np.ndarray | None) -> Expr:
    x = node.input(0)
    rank = len(ctx.shape_of(x))
    axes = ints(node.attr("axes", range(rank)))
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise node.error(f"axes {list(axes)} must be distinct axes of a rank-{rank} input")
    axes = tuple(a % rank for a in axes)
    valid = COORDINATE_MODES + (LEGACY_COORDINATE_MODES if node.opset < 13 else ())
    if coordinate_mode not in valid:
        raise node.error(f"coordinate_transformation_mode={coordinate_mode!r} is not valid at opset {node.opset}; "
                         f"expected one of {', '.join(valid)}")
    scale, out = _scales_or_sizes(node, ctx, axes, scales, sizes)
    if roi is not None and roi.size != 2 * len(axes):
        raise node.error(f"roi needs {2 * len(axes)} values (starts, ends), got {roi.size}")
    shape = ctx.shape_of(x)
    plans = []
    for n, k in enumerate(axes):
        pair = (float(roi[n]), float(roi[n + len(axes)])) if roi is not None else None
        plans.append((k, AxisResize(shape[k], out[n], scale[n], coordinate_mode, pair)))
    if any(a.n_in == 0 and a.n_out for _, a in plans):
        raise node.error(f"cannot resize an empty axis of input shape {shape}")
    return resize_axes(x, ctx.dtype_of(x), plans, spec)


@converter("Resize", since=10)
def resize_10(node: Node, ctx: ImportContext) -> Expr:
    """Opset 10: scales only, asymmetric coordinates (nearest: see the "simple" rule)."""
    spec = _spec(node, node.attr("mode", "nearest"), "simple", False)
    return _resize(node, ctx, spec, "asymmetric", ctx.constant(node.input(1), "the scales"), None, None)


@converter("Resize", since=11)
def resize_11(node: Node, ctx: ImportContext) -> Expr:
    spec = _spec(node, node.attr("mode", "nearest"), node.attr("nearest_mode", "round_prefer_floor"),
                 bool(node.attr("antialias", 0)))
    coordinate_mode = node.attr("coordinate_transformation_mode", "half_pixel")
    roi = _optional_constant(node, ctx, 1, "the roi") if coordinate_mode == "tf_crop_and_resize" else None
    scales = _optional_constant(node, ctx, 2, "the scales")
    sizes = _optional_constant(node, ctx, 3, "the sizes")
    if scales is not None and sizes is not None:
        raise node.error("only one of scales and sizes may be given")
    return _resize(node, ctx, spec, coordinate_mode, scales, sizes, roi)


def _upsample(node: Node, ctx: ImportContext, scales: np.ndarray) -> Expr:
    mode = node.attr("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        raise node.error(f"mode={mode!r} is not valid; expected nearest or linear")
    if np.any(np.asarray(scales) < 1):
        raise node.error(f"Upsample scales must be >= 1, got {np.asarray(scales).tolist()}")
    return _resize(node, ctx, _spec(node, mode, "floor", False), "asymmetric", np.asarray(scales), None, None)


@converter("Upsample", since=7)
def upsample_7(node: Node, ctx: ImportContext) -> Expr:
    return _upsample(node, ctx, np.asarray(node.attr("scales"), dtype=np.float32))


@converter("Upsample", since=9)
def upsample_9(node: Node, ctx: ImportContext) -> Expr:
    return _upsample(node, ctx, ctx.constant(node.input(1), "the scales"))
