"""N-d convolution (1-d, 2-d, 3-d) in NC[D]HW layout with OI[D]HW weights.

The loop schedule (register-blocked tiles, reduce axes outside the output's
spatial loops) lives in `conv_schedule`, shared with the transposed
convolution. Pointwise float32 convolutions (1x1, stride 1, unpadded) on
large enough maps are instead calls of the GEMM microkernel (`conv_gemm`),
and 2-d float32 depthwise ones on AVX2 and AVX-512 hosts calls of a
channel-blocked kernel (`conv_depthwise`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...tir import expr as E
from .._util import as_tensor, same_dtype
from ..registry import Op, OpPattern, TypeRelation, register_op
from ..schedule_context import ScheduleContext
from .conv_depthwise import choose_depthwise, depthwise_conv
from .conv_gemm import choose_pointwise_kernel, is_pointwise, pointwise_conv
from .conv_regions import plan_regions, region_conv
from .conv_schedule import ConvGeometry, conv_schedule, pad_input, planar_conv
from .conv_slices import sliced_conv


@dataclass(frozen=True)
class ConvAttrs:
    strides: tuple[int, ...]
    padding: tuple[int, ...]  # begins of every spatial dim, then ends
    dilation: tuple[int, ...]
    groups: int = 1


def conv_output_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int) -> int:
    return (size + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride + 1


def _check_attrs(attrs: ConvAttrs, d: int) -> None:
    if len(attrs.strides) != d or len(attrs.dilation) != d or len(attrs.padding) != 2 * d:
        raise TypeInferenceError(
            f"a {d}-d convolution needs {d} strides, {d} dilations and {2 * d} pads; got "
            f"strides={attrs.strides}, dilation={attrs.dilation}, padding={attrs.padding}"
        )
    if min(attrs.strides + attrs.dilation) < 1 or attrs.groups < 1 or min(attrs.padding, default=0) < 0:
        raise TypeInferenceError(f"strides, dilations and groups must be positive and pads >= 0: {attrs}")


def conv_type_rel(d: int) -> TypeRelation:
    """The type relation of a `d`-dimensional convolution (shared by qnn.conv2d)."""

    def type_rel(types: tuple[Type, ...], attrs: ConvAttrs) -> Type:
        data, weight = as_tensor(types[0], "data"), as_tensor(types[1], "weight")
        dtype = same_dtype([data, weight], "data and weight")
        if data.ndim != d + 2 or weight.ndim != d + 2:
            raise TypeInferenceError(
                f"a {d}-d convolution needs {d + 2}-d data and weight, got {data.shape} and {weight.shape}"
            )
        _check_attrs(attrs, d)
        n, c = data.shape[:2]
        oc, icpg = weight.shape[:2]
        if c != icpg * attrs.groups or oc % attrs.groups:
            raise TypeInferenceError(
                f"{c} input channels with groups={attrs.groups} do not fit weight {weight.shape} "
                f"(expected weight.shape[1] == channels / groups and weight.shape[0] divisible by groups)"
            )
        spatial = []
        for k in range(d):
            size = conv_output_size(data.shape[2 + k], weight.shape[2 + k], attrs.strides[k],
                                    attrs.dilation[k], attrs.padding[k], attrs.padding[d + k])
            if size < 1:
                raise TypeInferenceError(f"output size {size} < 1 in spatial dim {k}")
            spatial.append(size)
        return TensorType((n, oc, *spatial), dtype)

    return type_rel


def conv_reference(args: list[np.ndarray], attrs: ConvAttrs) -> np.ndarray:
    x, w = args
    d = x.ndim - 2
    pads = [(0, 0), (0, 0)] + [(attrs.padding[k], attrs.padding[d + k]) for k in range(d)]
    xp = np.pad(x, pads)
    n = x.shape[0]
    oc, icpg = w.shape[:2]
    g = attrs.groups
    ocpg = oc // g
    out_sp = [
        conv_output_size(x.shape[2 + k], w.shape[2 + k], attrs.strides[k], attrs.dilation[k],
                         attrs.padding[k], attrs.padding[d + k])
        for k in range(d)
    ]
    out = np.zeros((n, oc, *out_sp), dtype=np.float64)
    for kidx in np.ndindex(*w.shape[2:]):
        sl = tuple(
            slice(kidx[k] * attrs.dilation[k],
                  kidx[k] * attrs.dilation[k] + (out_sp[k] - 1) * attrs.strides[k] + 1,
                  attrs.strides[k])
            for k in range(d)
        )
        patch = xp[(slice(None), slice(None)) + sl]  # n, c, *out_sp
        for gi in range(g):
            pg = patch[:, gi * icpg:(gi + 1) * icpg]
            wg = w[gi * ocpg:(gi + 1) * ocpg][(slice(None), slice(None)) + kidx]  # ocpg, icpg
            out[:, gi * ocpg:(gi + 1) * ocpg] += np.einsum("nc...,oc->no...", pg, wg)
    return out.astype(x.dtype)


def _make_compute(d: int):
    def compute(inputs: list[te.Tensor], attrs: ConvAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
        data, weight = inputs
        oc, icpg = weight.shape[:2]
        geometry = ConvGeometry(tuple(out.shape), tuple(weight.shape[2:]), attrs.strides, attrs.dilation,
                                icpg, oc // attrs.groups, in_spatial=tuple(data.shape[2:]))

        def read_weight(c: E.PrimExpr, rc: E.PrimExpr, taps) -> E.PrimExpr:
            return weight[(c, rc, *taps)]

        if is_pointwise(geometry, attrs.padding) and data.dtype == weight.dtype == "float32":
            kernel = choose_pointwise_kernel(sched, geometry)
            if kernel is not None:
                return pointwise_conv(data, weight, geometry, kernel)
        if geometry.planar():
            # large dilations: only the taps that reach the image, only the outputs there are
            regions = plan_regions(data.shape[2:], geometry, attrs.padding[:d], attrs.padding[d:], sched)
            if regions is not None:
                return region_conv(data, regions, read_weight, geometry, sched, f"conv{d}d")
        else:  # 1-d and 3-d dilated ones as 2-d, split into regions likewise
            sliced = sliced_conv(data, read_weight, geometry, attrs.padding[:d], attrs.padding[d:], sched, f"conv{d}d")
            if sliced is not None:
                return sliced
        if weight.dtype == data.dtype and choose_depthwise(geometry, data.dtype, sched):
            return depthwise_conv(data, weight, geometry, attrs.padding[:d])  # (after the dilated regions)
        g = geometry.scheduled(sched)
        if g.planar():
            return planar_conv(data, attrs.padding[:d], attrs.padding[d:], read_weight, g, f"conv{d}d")
        ends = attrs.padding[d:]
        if g.uses_tiles():
            ends = ends[:-1] + (ends[-1] + g.tile_overhang(),)
        # a strided tiled schedule regroups (and so materialises) the padded input itself
        materialize = not (g.uses_tiles() and attrs.strides[-1] > 1)
        padded = pad_input(data, attrs.padding[:d], ends, 0.0, materialize=materialize)
        return conv_schedule(padded, read_weight, g, f"conv{d}d")

    return compute


def _register(d: int) -> Op:
    return register_op(
        f"nn.conv{d}d", type_rel=conv_type_rel(d), reference=conv_reference,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=_make_compute(d), attrs=ConvAttrs, num_inputs=2,
        doc=f"{d}-d convolution, NC{'DHW'[3 - d:]} data and OI{'DHW'[3 - d:]} weights.",
    )


conv1d = _register(1)
conv2d = _register(2)
conv3d = _register(3)
CONV_BY_RANK = {1: conv1d, 2: conv2d, 3: conv3d}
