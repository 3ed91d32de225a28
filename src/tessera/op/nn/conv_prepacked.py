"""`nn.conv2d_pointwise_prepacked`: a pointwise convolution whose constant weight was packed at compile time.

`conv2d_pointwise_prepacked(data, wp, channels=c)` is the 1x1, stride-1,
unpadded NCHW convolution of `data` with the weight (c, in / groups, 1, 1)
stored as `conv_gemm.pack_pointwise_weights(weight, groups, mr)`: shape
(groups, panels, in / groups, mr), each group's output channels in the GEMM
microkernel's A micro-panels. The PackGemmWeights pass writes it in place of
`nn.conv2d(data, constant)` where the convolution runs as microkernel calls,
so no kernel packs a weight on every call. Like `nn.conv2d`, the op takes a
fused elementwise tail.

`conv2d_pointwise_transposed(data, wp, channels=c, panel_height=mr)` is the
same convolution (one group) computed as outᵀ = Xᵀ Wᵀ, positions as the
microkernel's rows: `wp` is `pack_pointwise_weights(weight, 1, nr)`, which
is Wᵀ's B micro-panels (1, panels, in, nr). The pass writes it where that
product computes fewer padded multiply-adds (`conv_gemm.prepacked_pointwise_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...target.simd import float32_lanes
from ...tir import expr as E
from .._util import as_tensor, same_dtype
from ..registry import OpPattern, register_op
from ..schedule_context import ScheduleContext
from .conv import ConvAttrs, conv_reference
from .conv_gemm import pointwise_conv, pointwise_conv_transposed, unpack_pointwise_weights
from .conv_schedule import ConvGeometry
from .gemm import KERNELS_BY_LANES, GemmKernel


@dataclass(frozen=True)
class PrepackedConvAttrs:
    channels: int
    """Output channels: each group's last micro-panel is zero-padded past channels / groups."""
    panel_width: int
    """NR of the microkernel the weight was packed for (its MR is the packed weight's last axis)."""


def _type(types: tuple[Type, ...], attrs: PrepackedConvAttrs) -> Type:
    data, wp = as_tensor(types[0], "data"), as_tensor(types[1], "packed weight")
    dtype = same_dtype([data, wp], "conv2d_pointwise_prepacked operands")
    if data.ndim != 4 or wp.ndim != 4:
        raise TypeInferenceError(f"conv2d_pointwise_prepacked needs NCHW data and a packed weight (groups, "
                                 f"panels, in / groups, mr), got {data.shape} and {wp.shape}")
    groups, panels, per_in, mr = wp.shape
    if data.shape[1] != groups * per_in or attrs.channels % groups:
        raise TypeInferenceError(f"{data.shape[1]} input channels and {attrs.channels} output channels do "
                                 f"not fit {groups} groups of a packed weight {wp.shape}")
    per_out = attrs.channels // groups
    if not (panels - 1) * mr < per_out <= panels * mr:
        raise TypeInferenceError(f"{per_out} output channels per group do not fill {panels} micro-panels of {mr}")
    return TensorType((data.shape[0], attrs.channels, *data.shape[2:]), dtype)


def _reference(args: list[np.ndarray], attrs: PrepackedConvAttrs) -> np.ndarray:
    x, wp = args
    conv = ConvAttrs(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=wp.shape[0])
    return conv_reference([x, unpack_pointwise_weights(wp, attrs.channels)], conv)


def _kernel(sched: ScheduleContext, mr: int, nr: int) -> GemmKernel | None:
    wanted = GemmKernel(mr, nr)
    return wanted if wanted in KERNELS_BY_LANES.get(float32_lanes(sched.target) or 0, ()) else None


def _compute(inputs: list[te.Tensor], attrs: PrepackedConvAttrs, out: TensorType,
             sched: ScheduleContext) -> te.Tensor:
    data, wp = inputs
    groups, _, per_in, mr = wp.shape
    per_out = attrs.channels // groups
    kernel = _kernel(sched, mr, attrs.panel_width)
    if kernel is not None and out.dtype == "float32":
        geometry = ConvGeometry(tuple(out.shape), (1, 1), (1, 1), (1, 1), per_in, per_out,
                                in_spatial=tuple(data.shape[2:]))
        return pointwise_conv(data, wp, geometry, kernel, prepacked=True)
    # a target without that microkernel (the pass packs only for targets with one): read the panels
    return _panel_conv(data, wp, attrs.channels, out)


def _panel_conv(data: te.Tensor, wp: te.Tensor, channels: int, out: TensorType) -> te.Tensor:
    """The convolution as a plain reduction reading the weight through its micro-panels."""
    groups, _, per_in, mr = wp.shape
    per_out = channels // groups
    rc = te.reduce_axis(per_in, "rc")

    def element(n: E.Var, c: E.Var, h: E.Var, w: E.Var) -> E.PrimExpr:
        group, row = E.floordiv(c, per_out), E.floormod(c, per_out)
        weight = wp[group, E.floordiv(row, mr), rc.var, E.floormod(row, mr)]
        return te.sum(E.mul(data[n, E.add(E.mul(group, per_in), rc.var), h, w], weight), rc)

    return te.compute(out.shape, element, name="conv2d")


conv2d_pointwise_prepacked = register_op(
    "nn.conv2d_pointwise_prepacked", type_rel=_type, reference=_reference, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    compute=_compute, attrs=PrepackedConvAttrs, num_inputs=2,
    doc="NCHW data convolved 1x1 with a weight given as its GEMM A micro-panels (groups, panels, in / groups, mr).",
)


@dataclass(frozen=True)
class TransposedConvAttrs:
    channels: int
    """Output channels: the last micro-panel is zero-padded past them."""
    panel_height: int
    """MR of the microkernel the product runs on (its NR is the packed weight's last axis)."""


def _transposed_type(types: tuple[Type, ...], attrs: TransposedConvAttrs) -> Type:
    data, wp = as_tensor(types[0], "data"), as_tensor(types[1], "packed weight")
    dtype = same_dtype([data, wp], "conv2d_pointwise_transposed operands")
    if data.ndim != 4 or wp.ndim != 4 or wp.shape[0] != 1 or data.shape[1] != wp.shape[2]:
        raise TypeInferenceError(f"conv2d_pointwise_transposed needs NCHW data and a packed weight (1, panels, "
                                 f"in channels, nr), got {data.shape} and {wp.shape}")
    _, panels, _, nr = wp.shape
    if not (panels - 1) * nr < attrs.channels <= panels * nr:
        raise TypeInferenceError(f"{attrs.channels} output channels do not fill {panels} micro-panels of {nr}")
    return TensorType((data.shape[0], attrs.channels, *data.shape[2:]), dtype)


def _transposed_reference(args: list[np.ndarray], attrs: TransposedConvAttrs) -> np.ndarray:
    return _reference(args, PrepackedConvAttrs(attrs.channels, 0))


def _transposed_compute(inputs: list[te.Tensor], attrs: TransposedConvAttrs, out: TensorType,
                        sched: ScheduleContext) -> te.Tensor:
    data, wp = inputs
    _, _, per_in, nr = wp.shape
    kernel = _kernel(sched, attrs.panel_height, nr)
    if kernel is not None and out.dtype == "float32":
        geometry = ConvGeometry(tuple(out.shape), (1, 1), (1, 1), (1, 1), per_in, attrs.channels,
                                in_spatial=tuple(data.shape[2:]))
        return pointwise_conv_transposed(data, wp, geometry, kernel)
    return _panel_conv(data, wp, attrs.channels, out)


conv2d_pointwise_transposed = register_op(
    "nn.conv2d_pointwise_transposed", type_rel=_transposed_type, reference=_transposed_reference,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=_transposed_compute, attrs=TransposedConvAttrs, num_inputs=2,
    doc="NCHW data convolved 1x1 as outᵀ = Xᵀ Wᵀ, positions as the GEMM's rows, with Wᵀ given as its B "
        "micro-panels (1, panels, in channels, nr).",
)
