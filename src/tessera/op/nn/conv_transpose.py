"""N-d transposed convolution (1-d, 2-d, 3-d): NC[D]HW data, IO[D]HW weights.

A transposed convolution is a stride-1 convolution of the input spread out
by the stride (stride - 1 zeros between elements) and padded by
`dilation * (kernel - 1) - pad`, with the kernel flipped and its two channel
axes swapped. The spread input is materialised once; the reduction then
uses the convolution's schedule (`conv_schedule`).

Padding: `padding` holds the begins, then the ends, of every spatial dim,
and may be negative (ONNX's `output_padding` and `output_shape` extend the
output at the end, which is a negative end pad here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...tir import expr as E
from .._util import as_tensor, same_dtype
from ..registry import Op, OpPattern, register_op
from ..schedule_context import ScheduleContext
from .conv_schedule import ConvGeometry, conv_schedule, planar_conv


@dataclass(frozen=True)
class ConvTransposeAttrs:
    strides: tuple[int, ...]
    padding: tuple[int, ...]  # begins, then ends; may be negative
    dilation: tuple[int, ...]
    groups: int = 1


def conv_transpose_output_size(size: int, kernel: int, stride: int, dilation: int,
                               pad_begin: int, pad_end: int) -> int:
    return (size - 1) * stride + dilation * (kernel - 1) + 1 - pad_begin - pad_end


def _out_spatial(data: tuple[int, ...], weight: tuple[int, ...], a: ConvTransposeAttrs) -> list[int]:
    d = len(data) - 2
    return [
        conv_transpose_output_size(data[2 + k], weight[2 + k], a.strides[k], a.dilation[k],
                                   a.padding[k], a.padding[d + k])
        for k in range(d)
    ]


def _make_type_rel(d: int):
    def type_rel(types: tuple[Type, ...], attrs: ConvTransposeAttrs) -> Type:
        data, weight = as_tensor(types[0], "data"), as_tensor(types[1], "weight")
        dtype = same_dtype([data, weight], "data and weight")
        if data.ndim != d + 2 or weight.ndim != d + 2:
            raise TypeInferenceError(
                f"a {d}-d transposed convolution needs {d + 2}-d data and weight, "
                f"got {data.shape} and {weight.shape}"
            )
        if len(attrs.strides) != d or len(attrs.dilation) != d or len(attrs.padding) != 2 * d:
            raise TypeInferenceError(
                f"a {d}-d transposed convolution needs {d} strides, {d} dilations and {2 * d} pads; got "
                f"strides={attrs.strides}, dilation={attrs.dilation}, padding={attrs.padding}"
            )
        if min(attrs.strides + attrs.dilation) < 1 or attrs.groups < 1:
            raise TypeInferenceError(f"strides, dilations and groups must be positive: {attrs}")
        c = data.shape[1]
        if weight.shape[0] != c or c % attrs.groups:
            raise TypeInferenceError(
                f"{c} input channels with groups={attrs.groups} do not fit weight {weight.shape} "
                f"(expected weight.shape[0] == channels, divisible by groups)"
            )
        spatial = _out_spatial(data.shape, weight.shape, attrs)
        if min(spatial) < 1:
            raise TypeInferenceError(f"output size {spatial} has an empty spatial dim")
        return TensorType((data.shape[0], weight.shape[1] * attrs.groups, *spatial), dtype)

    return type_rel


def conv_transpose_reference(args: list[np.ndarray], a: ConvTransposeAttrs) -> np.ndarray:
    """Scatter form: every input element adds kernel * value into the output."""
    x, w = args
    d = x.ndim - 2
    n, c = x.shape[:2]
    g = a.groups
    icpg, ocpg = c // g, w.shape[1]
    out_sp = _out_spatial(x.shape, w.shape, a)
    offsets = [max(0, -a.padding[k]) for k in range(d)]
    full = [
        offsets[k] + max((x.shape[2 + k] - 1) * a.strides[k] + a.dilation[k] * (w.shape[2 + k] - 1) + 1,
                         a.padding[k] + out_sp[k])
        for k in range(d)
    ]
    acc = np.zeros((n, ocpg * g, *full), dtype=np.float64)
    for kidx in np.ndindex(*w.shape[2:]):
        sl = tuple(
            slice(offsets[k] + kidx[k] * a.dilation[k],
                  offsets[k] + kidx[k] * a.dilation[k] + (x.shape[2 + k] - 1) * a.strides[k] + 1,
                  a.strides[k])
            for k in range(d)
        )
        for gi in range(g):
            xg = x[:, gi * icpg:(gi + 1) * icpg].astype(np.float64)
            wg = w[gi * icpg:(gi + 1) * icpg][(slice(None), slice(None)) + kidx]  # icpg, ocpg
            acc[(slice(None), slice(gi * ocpg, (gi + 1) * ocpg)) + sl] += np.einsum("nc...,co->no...", xg, wg)
    crop = tuple(slice(offsets[k] + a.padding[k], offsets[k] + a.padding[k] + out_sp[k]) for k in range(d))
    return acc[(slice(None), slice(None)) + crop].astype(x.dtype)


def _spread(data: te.Tensor, a: ConvTransposeAttrs, kernel: tuple[int, ...], out_sp: list[int],
            overhang: int) -> te.Tensor:
    """The input spread by the strides and padded for a stride-1 convolution
    (plus `overhang` columns at the end of the last dim for the tiled schedule)."""
    d = len(kernel)
    begins = [a.dilation[k] * (kernel[k] - 1) - a.padding[k] for k in range(d)]
    shape = tuple(data.shape[:2]) + tuple(out_sp[k] + a.dilation[k] * (kernel[k] - 1) for k in range(d))
    shape = shape[:-1] + (shape[-1] + overhang,)

    def element(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        inside: E.PrimExpr = E.IntImm(1, "bool")
        src = []
        for k in range(d):
            s, size = a.strides[k], data.shape[2 + k]
            rel = E.sub(pos[k], begins[k])
            inside = E.logical_and(inside, E.logical_and(E.ge(rel, 0), E.lt(rel, (size - 1) * s + 1)))
            clamped = E.maximum(rel, 0)
            if s > 1:
                inside = E.logical_and(inside, E.eq(E.floormod(clamped, s), 0))
            src.append(E.minimum(E.floordiv(clamped, s), size - 1))
        return E.select(inside, data[(n, c, *src)], E.const(0, data.dtype))

    names = ["n", "c", *(f"i{k}" for k in range(d))]
    return te.compute(shape, element, name="spread", axis_names=names, materialize=True)


def _make_compute(d: int):
    def compute(inputs: list[te.Tensor], attrs: ConvTransposeAttrs, out: TensorType,
                sched: ScheduleContext) -> te.Tensor:
        data, weight = inputs
        kernel = tuple(weight.shape[2:])
        icpg, ocpg = weight.shape[0] // attrs.groups, weight.shape[1]
        g = ConvGeometry(tuple(out.shape), kernel, (1,) * d, attrs.dilation, icpg, ocpg,
                         workload_op=f"conv{d}d_transpose").scheduled(sched)
        overhang = g.tile_overhang() if g.uses_tiles() else 0
        spread = _spread(data, attrs, kernel, list(out.shape[2:]), overhang)

        def read_weight(c: E.PrimExpr, rc: E.PrimExpr, taps) -> E.PrimExpr:
            """The kernel flipped, with its channel axes swapped."""
            in_c = g.input_channel(c, rc)
            out_c = E.floormod(c, ocpg) if g.grouped else c
            return weight[(in_c, out_c, *(E.sub(kernel[k] - 1, t) for k, t in enumerate(taps)))]

        if g.planar():
            return planar_conv(spread, (0,) * d, (0,) * d, read_weight, g, f"conv{d}d_transpose")
        return conv_schedule(spread, read_weight, g, f"conv{d}d_transpose")

    return compute


def _register(d: int) -> Op:
    return register_op(
        f"nn.conv{d}d_transpose", type_rel=_make_type_rel(d), reference=conv_transpose_reference,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=_make_compute(d), attrs=ConvTransposeAttrs,
        num_inputs=2,
        doc=f"{d}-d transposed convolution, NC{'DHW'[3 - d:]} data and IO{'DHW'[3 - d:]} weights.",
    )


conv1d_transpose = _register(1)
conv2d_transpose = _register(2)
conv3d_transpose = _register(3)
CONV_TRANSPOSE_BY_RANK = {1: conv1d_transpose, 2: conv2d_transpose, 3: conv3d_transpose}
