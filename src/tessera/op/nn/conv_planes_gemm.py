"""`nn.conv2d_planes_prepacked`: a dense 2-d convolution as one GEMM per image over its padded input planes.

The planar schedule (`conv_schedule.planar_tiles`) multiplies one broadcast weight by a vector of output
positions, and reads a tile's weights with a stride of in_channels x taps. On AVX2 that ran at about 18 G
multiply-adds per second on VGG-19's and Inception's 3x3 layers (AMD EPYC Zen 3, one thread), while the
GEMM microkernel ran a matrix product of the same size at 33-37 G, onnxruntime's speed.

So here the convolution is that product: out[c, p] = sum over k of W[c, k] . B[k, p], where k runs over
(input channel, tap) and p over output positions. Row k of B is a plane of the input, shifted by k's tap: a
contiguous run of memory, so B is never built (an implicit im2col): the microkernel's packing reads its
micro-panels from the planes through a table of row offsets (`ts_sgemm_<MR>x<NR>_planes`). The weight,
(OC, IC x KH x KW), is packed at compile time into the microkernel's A micro-panels (`pack_planes_weights`).

p runs over the output's own positions, so C is the NCHW output itself: the GEMM writes it directly and
runs the fused tail on each finished tile (`te.gemm_epilogue`). Two layouts of the planes (`PlaneLayout`):

- pitched: the padded input planes of each stride phase, their rows `pitch` wide (wider than the output's
  rows by the taps' reach). Output row y's positions are B's columns from y*pitch on; a micro-panel of
  positions that runs over a row's end is packed from two runs of each plane row (the entry's `width`):

      planes[n, c, ph, pw, r, x] = data[n, c, r*sh + ph - top, x*sw + pw - left]  (zero outside: `plane_copy`)
      out[n, c, y*out_width + x] = the GEMM, B's column y*pitch + x

- shifted, for a column stride of 1 and outputs narrower than a micro-panel: one copy of each input plane per
  column tap, shifted by that tap and as wide as the output, so B's columns are the output's positions and no
  panel needs two runs (KW copies of the input instead of one):

      planes[n, c, ph, j, r, x] = data[n, c, r*sh + ph - top, x + j - left]

The PackGemmWeights pass writes it in place of `nn.conv2d(data, constant)` where `planes_gemm_kernel` says
so: on AVX2, and on AVX-512 for a network's stem only (WORKLOAD_LANES, STEM_LANES).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...target.simd import float32_lanes
from ...target.target import Target
from ...te.gemm_epilogue import GemmEpilogue, GemmOutput
from ...tir import expr as E
from ...tir import stmt as S
from ...tir.buffer import Buffer
from .._util import as_tensor, same_dtype
from ..registry import OpPattern, register_op
from ..schedule_context import ScheduleContext
from .conv import ConvAttrs, conv_output_size, conv_reference
from .conv_planes import plane_copy
from .gemm import DEFAULT_KERNELS_BY_LANES, KERNELS_BY_LANES, GemmKernel, default_kernel, gemm_call, pack_a_panels

# float32 lanes of the targets the pass packs every convolution for: AVX2. On AVX-512 the blocked and planar
# schedules stay: with the planes GEMM for 16 lanes too (12x32 and 8x32 tiles), ResNet-50 took 1.07x the time,
# Inception-v2 1.09x, SqueezeNet 1.00x (shifted planes below 32 output columns instead of 16: ResNet-50 1.05x;
# one thread, 2-core AMD EPYC Zen 4, in-process A/B, 8 alternating rounds)
WORKLOAD_LANES = (8,)
# but for a network's stem (an image's few channels in): there the planar tile's reduction is short (27
# multiply-adds for 3 channels of 3x3) and the GEMM's packed panels win. Stems only, same A/B, 8-16 rounds:
# SqueezeNet 0.95x the time at one thread and 0.97x at two, ZFNet 0.98x, ResNet-50 0.98x and 0.99x (its 7x7:
# 2.85 -> 2.38 ms), Inception-v1 0.99x, AlexNet 0.99x, DenseNet-121 0.99x, VGG-19 1.00x; ic_resnet8 and
# kws_ds_cnn even
STEM_LANES = (16,)
STEM_MAX_CHANNELS = 4
MIN_OUT_CHANNELS = 16  # fewer rows of A leave most of a 6-row micro-panel's loads unshared
# computed positions (rows x pitch) per image below which the blocked tiles (`conv_blocked`) stay: one thread,
# Zen 3, time against the schedule it replaced: 3x3 convolutions 64->64 at 8x8 0.78, 512->512 at 7x7 0.88,
# 128->128 at 6x6 (planar) 0.55, 16->32 at 16x16 0.82; 64->64 at 5x5 (35 positions) 1.07, about even
MIN_POSITIONS = 32
# Shifted planes or pitched ones (`PlaneLayout.choose`): pitched ones where the output's rows are at least a
# micro-panel (AVX2's NR) wide, so at most one panel in two runs over a row's end. In a C harness on a Zen 3
# (one thread, alternating, the copies included, outputs bit-identical), pitched against shifted took 0.82x
# the time for 16 -> 16 channels at 32x32, 0.89x for 16 -> 64 at 55x55, 0.90x for 128 -> 128 at 28x28, 0.92x
# for 64 -> 64 at 56x56; but 1.01-1.09x for 256 -> 256 at 14x14 and 64 -> 256 at 13x13 over repeated runs
# (48 -> 192 at 13x13 0.90-0.97x), where every panel spans two or more rows.
PANEL_COLUMNS = DEFAULT_KERNELS_BY_LANES[WORKLOAD_LANES[0]][0].nr
# Larger shifted planes keep the pitched ones: the GEMM's B rows then span more memory than the caches and the
# TLB reach (4 KiB pages) hold (VGG-19's 128 -> 128 channels at 112x112, 20 MB of shifted planes, 1.13x the
# time of pitched ones).
MAX_SHIFTED_BYTES = 2 << 20
# the entry keeps a row offset per (input channel, tap) on the stack: at most 256 KiB of it (worker and
# Python threads have megabytes of stack); deeper reductions keep the planar schedule
MAX_DEPTH = 1 << 16


@dataclass(frozen=True)
class PlanesGemmAttrs:
    channels: int
    """Output channels: the last micro-panel is zero-padded past them."""
    kernel_size: tuple[int, int]
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    panel_width: int
    """NR of the microkernel the weight was packed for (its MR is the packed weight's last axis)."""


@dataclass(frozen=True)
class PlaneLayout:
    """The input planes of one image: (channels, phases_h, phases_w, rows, pitch) floats. Plane (ph, pw) of a
    channel holds the padded input from row ph and column pw on, every `column_stride`-th column."""

    rows: int  # per stride phase, one more than the padded input needs (the dropped columns read past it)
    pitch: int
    phases: tuple[int, int] = (1, 1)  # stride phases copied: the stride, or 1 where every tap reads phase 0
    column_stride: int = 0  # the stride along a plane's row; 0: the convolution's own

    @classmethod
    def of(cls, in_spatial: Sequence[int], strides: Sequence[int], padding: Sequence[int],
           kernel: Sequence[int] = (1, 1), dilation: Sequence[int] = (1, 1)) -> "PlaneLayout":
        """The padded stride-phase planes a convolution of these `strides` reads (the module doc's second)."""
        (h, w), (sh, sw), (top, left, bottom, right) = in_spatial, strides, padding
        # a 1x1 of stride 2 reads a quarter of its input: copy that phase only
        phases = tuple(1 if k == 1 or d % s == 0 else s for k, d, s in zip(kernel, dilation, strides))
        return cls(-(-(h + top + bottom) // sh) + 1, -(-(w + left + right) // sw), (phases[0], phases[1]))

    @classmethod
    def shifted_of(cls, in_spatial: Sequence[int], strides: Sequence[int], padding: Sequence[int],
                   kernel: Sequence[int], dilation: Sequence[int] = (1, 1)) -> "PlaneLayout | None":
        """A plane per column tap, as wide as the output (the module doc's first), or None where the column
        stride or dilation is not 1."""
        if strides[1] != 1 or dilation[1] != 1:
            return None
        pitched = cls.of(in_spatial, strides, padding, kernel, dilation)
        out_width = in_spatial[1] + padding[1] + padding[3] - kernel[1] + 1
        return cls(pitched.rows, out_width, (pitched.phases[0], kernel[1]), 1)

    @classmethod
    def choose(cls, in_shape: Sequence[int], out_shape: Sequence[int], strides: Sequence[int],
               padding: Sequence[int], kernel: Sequence[int], dilation: Sequence[int]) -> "PlaneLayout":
        """The layout for NCHW shapes `in_shape` -> `out_shape`: shifted planes where the output's rows are
        narrower than PANEL_COLUMNS and the planes fit MAX_SHIFTED_BYTES, else pitched ones."""
        pitched = cls.of(in_shape[2:], strides, padding, kernel, dilation)
        shifted = cls.shifted_of(in_shape[2:], strides, padding, kernel, dilation)
        if shifted is None or shifted.floats(in_shape[1]) * 4 > MAX_SHIFTED_BYTES or out_shape[3] >= PANEL_COLUMNS:
            return pitched
        return shifted

    @property
    def shifted(self) -> bool:
        """A plane per column tap, not per stride phase."""
        return self.column_stride == 1

    def floats(self, channels: int) -> int:
        return channels * self.phases[0] * self.phases[1] * self.rows * self.pitch


def pack_planes_weights(weight: np.ndarray, mr: int) -> np.ndarray:
    """(OC, IC, KH, KW) -> A micro-panels of the (OC, IC x KH x KW) matrix: shape (ceil(OC / mr), IC x KH x KW, mr)."""
    return np.ascontiguousarray(pack_a_panels(weight.reshape(weight.shape[0], -1), mr))


def unpack_planes_weights(packed: np.ndarray, channels: int, in_channels: int,
                          kernel_size: Sequence[int]) -> np.ndarray:
    panels, k, mr = packed.shape
    matrix = packed.transpose(0, 2, 1).reshape(panels * mr, k)[:channels]
    return matrix.reshape(channels, in_channels, *kernel_size)


def planes_gemm_kernel(target: Target, in_shape: Sequence[int], out_shape: Sequence[int],
                       kernel: Sequence[int], attrs: ConvAttrs) -> GemmKernel | None:
    """The microkernel a constant float32 convolution's weight is packed for, or None to leave it to the
    other schedules: targets other than WORKLOAD_LANES' (STEM_LANES' for convolutions of at most
    STEM_MAX_CHANNELS input channels), grouped and dilated convolutions, fewer than
    MIN_OUT_CHANNELS output channels or MIN_POSITIONS computed positions, more than MAX_DEPTH input channels
    x taps, planes of 2**31 floats or more. (1x1 convolutions the pointwise GEMM forms take are packed by those
    first.)"""
    lanes = float32_lanes(target) or 0
    stem = lanes in STEM_LANES and in_shape[1] <= STEM_MAX_CHANNELS
    if (lanes not in WORKLOAD_LANES and not stem) or attrs.groups != 1 or any(d != 1 for d in attrs.dilation):
        return None  # dilated: the planes would hold all the padding (`conv_regions` skips it)
    pitched = PlaneLayout.of(in_shape[2:], attrs.strides, attrs.padding)
    if out_shape[1] < MIN_OUT_CHANNELS or out_shape[2] * pitched.pitch < MIN_POSITIONS:
        return None
    if in_shape[1] * math.prod(kernel) > MAX_DEPTH:
        return None
    layout = PlaneLayout.choose(in_shape, out_shape, attrs.strides, attrs.padding, kernel, attrs.dilation)
    if layout.floats(in_shape[1]) >= 2**31:
        return None  # the entry's row offsets are int32
    return default_kernel(DEFAULT_KERNELS_BY_LANES[lanes], out_shape[1])


def _type(types: tuple[Type, ...], attrs: PlanesGemmAttrs) -> Type:
    data, wp = as_tensor(types[0], "data"), as_tensor(types[1], "packed weight")
    dtype = same_dtype([data, wp], "conv2d_planes_prepacked operands")
    if data.ndim != 4 or wp.ndim != 3:
        raise TypeInferenceError(f"conv2d_planes_prepacked needs NCHW data and a packed weight (panels, "
                                 f"in channels x taps, mr), got {data.shape} and {wp.shape}")
    panels, k, mr = wp.shape
    kh, kw = attrs.kernel_size
    if k != data.shape[1] * kh * kw or not (panels - 1) * mr < attrs.channels <= panels * mr:
        raise TypeInferenceError(f"a packed weight {wp.shape} does not hold {attrs.channels} output channels "
                                 f"x {data.shape[1]} input channels x {kh}x{kw} taps in micro-panels")
    spatial = []
    for d, (size, taps) in enumerate(zip(data.shape[2:], attrs.kernel_size)):
        out = conv_output_size(size, taps, attrs.strides[d], attrs.dilation[d], attrs.padding[d], attrs.padding[2 + d])
        if out < 1:
            raise TypeInferenceError(f"output size {out} < 1 in spatial dim {d}")
        spatial.append(out)
    return TensorType((data.shape[0], attrs.channels, *spatial), dtype)


def _conv_attrs(attrs: PlanesGemmAttrs) -> ConvAttrs:
    return ConvAttrs(attrs.strides, attrs.padding, attrs.dilation)


def _reference(args: list[np.ndarray], attrs: PlanesGemmAttrs) -> np.ndarray:
    x, wp = args
    weight = unpack_planes_weights(wp, attrs.channels, x.shape[1], attrs.kernel_size)
    return conv_reference([x, weight], _conv_attrs(attrs))


def _planes(data: te.Tensor, attrs: PlanesGemmAttrs, layout: PlaneLayout) -> te.Tensor:
    """The input planes of `data` in `layout`: a kernel input is copied by loops bounded by the padding
    (`plane_copy`); a computed one (a fused producer) goes through a select, where it is inlined."""
    sh, (top, left) = attrs.strides[0], attrs.padding[:2]
    sw = layout.column_stride or attrs.strides[1]
    shape = (data.shape[0], data.shape[1], *layout.phases, layout.rows, layout.pitch)
    if isinstance(data.op, te.PlaceholderOp):
        return plane_copy(data, shape, (top, left), (sh, sw), "planes", column_taps=layout.shifted)

    def element(n: E.Var, c: E.Var, ph: E.Var, pw: E.Var, r: E.Var, x: E.Var) -> E.PrimExpr:
        h, w = E.sub(E.add(E.mul(r, sh), ph), top), E.sub(E.add(E.mul(x, sw), pw), left)
        return _padded_read(data, n, c, h, w)

    return te.compute(shape, element, name="planes")


def _padded_read(data: te.Tensor, n: E.PrimExpr, c: E.PrimExpr, h: E.PrimExpr, w: E.PrimExpr) -> E.PrimExpr:
    """data[n, c, h, w], zero where (h, w) lies outside the image (the index clamped so the read stays in bounds)."""
    height, width = data.shape[2:]
    inside = E.logical_and(E.logical_and(E.ge(h, 0), E.lt(h, height)), E.logical_and(E.ge(w, 0), E.lt(w, width)))
    value = data[n, c, E.minimum(E.maximum(h, 0), height - 1), E.minimum(E.maximum(w, 0), width - 1)]
    return E.select(inside, value, E.const(0.0, data.dtype))


def planes_gemm_conv(data: te.Tensor, wp: te.Tensor, attrs: PlanesGemmAttrs, out_shape: tuple[int, ...],
                     kernel: GemmKernel) -> te.Tensor:
    """The convolution as one `kernel.planes_symbol` call per image into the output itself, a fused tail run
    on its tiles (see the module doc)."""
    batch, channels, out_height, out_width = out_shape
    layout = PlaneLayout.choose(data.shape, out_shape, attrs.strides, attrs.padding, attrs.kernel_size,
                                attrs.dilation)
    planes = _planes(data, attrs, layout)
    positions, zero = out_height * out_width, E.IntImm(0)
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel_size, attrs.strides, attrs.dilation
    # shifted planes: column tap j is plane j of the channel, read from its start (the entry's phase j % sw,
    # offset j / sw within it, with sw taken as KW)
    sw, dw = (kw, 1) if layout.shifted else (sw, dw)
    image = te.axis(batch, "n")

    def product(ins: tuple[Buffer, ...], out: Buffer, epilogue: GemmEpilogue | None) -> S.Stmt:
        x, w = ins
        return gemm_call(kernel.planes_symbol, (channels, positions, te.pointer(w),
                                                te.pointer(x, image.var, zero, zero, zero, zero, zero),
                                                data.shape[1], kh, kw, dh, dw, sh, sw, *layout.phases, layout.rows,
                                                layout.pitch, out_width),
                         out, (image.var, *(zero,) * (len(out.shape) - 1)), positions, epilogue)

    # C's rows are output channels, its columns the positions
    return te.extern(out_shape, [planes, wp], lambda ins, out: product(ins, out, None), name="conv2d_gemm",
                     loops=[image], gemm_output=GemmOutput((1,), (2, 3), product))


def _plain_conv(data: te.Tensor, wp: te.Tensor, attrs: PlanesGemmAttrs, out_shape: tuple[int, ...]) -> te.Tensor:
    """The convolution as a plain reduction reading the weight through its micro-panels (targets without the
    microkernel; the pass packs only for targets with one)."""
    mr = wp.shape[-1]
    kh, kw = attrs.kernel_size
    (sh, sw), (dh, dw), (top, left) = attrs.strides, attrs.dilation, attrs.padding[:2]
    rc, ry, rx = te.reduce_axis(data.shape[1], "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    def element(n: E.Var, c: E.Var, y: E.Var, x: E.Var) -> E.PrimExpr:
        h = E.sub(E.add(E.mul(y, sh), E.mul(ry.var, dh)), top)
        w = E.sub(E.add(E.mul(x, sw), E.mul(rx.var, dw)), left)
        row = E.add(E.mul(E.add(E.mul(rc.var, kh), ry.var), kw), rx.var)
        weight = wp[E.floordiv(c, mr), row, E.floormod(c, mr)]
        return te.sum(E.mul(_padded_read(data, n, rc.var, h, w), weight), [rc, ry, rx])

    return te.compute(out_shape, element, name="conv2d")


def _compute(inputs: list[te.Tensor], attrs: PlanesGemmAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    data, wp = inputs
    wanted = GemmKernel(wp.shape[-1], attrs.panel_width)
    if out.dtype == "float32" and wanted in KERNELS_BY_LANES.get(float32_lanes(sched.target) or 0, ()):
        return planes_gemm_conv(data, wp, attrs, tuple(out.shape), wanted)
    return _plain_conv(data, wp, attrs, tuple(out.shape))


conv2d_planes_prepacked = register_op(
    "nn.conv2d_planes_prepacked", type_rel=_type, reference=_reference, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    compute=_compute, attrs=PlanesGemmAttrs, num_inputs=2,
    doc="NCHW data convolved with a weight given as the GEMM A micro-panels of its (OC, IC x KH x KW) matrix "
        "(panels, IC x KH x KW, mr), as one product over the padded input planes.",
)


__all__ = ("PlaneLayout", "PlanesGemmAttrs", "conv2d_planes_prepacked", "pack_planes_weights", "planes_gemm_conv",
           "planes_gemm_kernel", "unpack_planes_weights")
