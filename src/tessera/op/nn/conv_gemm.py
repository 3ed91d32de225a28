"""Pointwise (1x1, stride 1, unpadded) float32 convolutions as calls of the GEMM microkernel.

In NCHW such a convolution is a matrix product per image and group: the
weights (output x input channels) times the input's channel matrix (input
channels x H*W positions), written straight into the output's channel
matrix. `gemm`'s packed-panel microkernel reads both operands in place,
so the planar schedule's copy of the input into planes and its copy of the
tiles into NCHW both go away; fused epilogues (bias, Clip, residual add)
run as the extern's in-place elementwise tail.

The register tile is the one whose row panels waste the fewest rows on the
group's output channels (MobileNet's 16-channel projections fill two 8-row
panels, not two 12-row ones), among the target's default kernels
(`DEFAULT_KERNELS`); `tessera tune` may pick another.

The weights are the product's A operand, which the microkernel packs into
MR-row micro-panels on every call. A constant weight is packed once instead:
the PackGemmWeights pass stores it as `pack_pointwise_weights` lays it out
and the convolution becomes `nn.conv2d_pointwise_prepacked`, whose kernel
calls `ts_sgemm_<MR>x<NR>_prepacked_a` (only the input is packed at run
time).

Small maps waste most of a column panel that way (3x3 = 9 positions in
32 columns), so there, and for deep reductions, the product runs the other
way round: outᵀ = Xᵀ Wᵀ, positions as rows (padded to MR only) and output
channels as columns (`pointwise_conv_transposed`, the op
`nn.conv2d_pointwise_transposed`, the weight packed as Wᵀ's B panels). The
microkernel's vector stores cannot write C with a column stride, so the
product lands in scratch and a vector 8 x 8 transpose writes NCHW.
`prepacked_pointwise_plan` picks the form by padded multiply-adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import te
from ...target.simd import float32_lanes
from ...target.target import Target
from ...te.gemm_epilogue import GemmEpilogue, GemmOutput
from ...tir import expr as E
from ...tir import stmt as S
from ...tir.buffer import Buffer
from .conv_schedule import ConvGeometry
from .gemm import (DEFAULT_KERNELS_BY_LANES, KERNELS_BY_LANES, MIN_ROWS, GemmKernel, gemm_call, pack_a_panels,
                   unpack_b_panels)
from ..schedule_context import ScheduleContext

WORKLOAD_OP = "conv2d_gemm"  # the operator named in tuning logs
TRANSPOSE = "ts_transpose_float32"  # (rows, cols, src, dst): dst = srcᵀ, C text in codegen/c_transpose.py
# Fewer output positions (a 12x12 map or smaller) keep the planar schedule: the microkernel packs
# non-constant weights on every call, a cost the product amortises only over enough columns (VWW's 6x6 and 3x3
# pointwise convolutions ran 1.4-1.7x slower as GEMM calls; 12x12 broke even, 24x24 won).
MIN_POSITIONS = 128
# Deep reductions keep it too: the planar schedule's extra passes (planes, tile copy) cost about
# 1/in_channels per multiply-add, while the microkernel re-reads C once per K block. ResNet-50's
# 1x1 convolutions over 512 or 1024 channels ran 5-18% slower as GEMM calls, those over 64 to 256
# channels 5-20% faster; 256 still won on 56x56 maps (AMD EPYC Zen 4, AVX-512).
MAX_DEPTH = 128
MAX_DEPTH_LARGE_MAPS = 256
LARGE_MAP = 1024  # output positions
# Limits for weights packed at compile time (`prepacked_pointwise_kernel`): the same depths. Prepacking made
# the GEMM calls 2-5% faster where they already ran, and 8-36% faster than the calls packing the weights on
# ResNet-50's 512-2048-channel convolutions, but those then only matched the planar schedule (1.02-1.05x
# its time; the microkernel still packs the input and re-reads C per K block). Maps of 64 to 127 positions
# run faster so: 64->64 channels at 25x5 (KWS) 0.92x the planar schedule's time, 64->128 at 10x10 0.93x.
# Fewer positions waste most of a 32-wide column panel (6x6: 1.3x); the transposed product takes those
# (AMD EPYC Zen 4, AVX-512, one thread, alternating runs of each shape).
PREPACKED_MIN_POSITIONS = 64
# Depths to 256 on maps below LARGE_MAP too: Inception's 192- and 256-channel reductions at 28x28 ran
# 0.93-0.96x the planar schedule's time (and 0.95-0.97x the transposed product's).
PREPACKED_MAX_DEPTH = MAX_DEPTH_LARGE_MAPS
PREPACKED_MAX_DEPTH_LARGE_MAPS = MAX_DEPTH_LARGE_MAPS
# outᵀ = Xᵀ Wᵀ (`pointwise_conv_transposed`, one group, weight packed as B): positions are the rows, so
# small maps pad to MR rather than to a 32-wide panel, and output channels fill the columns. Its price is
# a transposing pass into NCHW, counted as TRANSPOSE_COST multiply-adds per output element against the
# padded products. Measured against the planar schedule and the product with channels as rows: 256->256 at
# 3x3 0.30x the planar time, 128->128 at 6x6 0.80x, 64->64 at 14x14 0.95x the other product's; 2048->512 and
# 512->2048 at 7x7 0.88-0.91x, 1024->128 at 14x14 0.89x (deep reductions keep the planar schedule otherwise);
# 16->96 at 56x56 1.35x and 32->32 at 16x16 1.3x the other product's (the model picks that one there).
# 16 rather than 8 since AVX2 products default to 6x16 (DEFAULT_KERNELS): the transposed product's tail runs as
# passes after the transpose, the other's on its tiles. 16 against 8, Zen 3, one thread, medians of 8 in-process
# rounds with fresh modules: efficientnet_block 0.94x the time, mobilenet_v3_block 0.92x, mobilenet_v2_block
# 0.96x (their 96->16 projections with the residual add), squeezenet 0.98x, ResNet-50 0.98x, aspp_head 1.02x,
# inception_v1 1.00x. 40 rather than 16: the squeeze and reduction layers of SqueezeNet and Inception (16 or 32
# channels out of 128-256 at 27x27 and 55x55) and DenseNet's 256->128 at 14x14 then take channels as rows:
# 128->16 at 55x55 in 0.77x the transposed product's time at one thread and two, 256->32 at 27x27 0.99x and
# 0.93x, 192->32 at 28x28 0.95x and 0.96x, 256->128 at 14x14 1.04x and 0.98x (Zen 3, one convolution with bias
# and ReLU, 30 alternating pairs of min-of-5 runs, same bits). No pointwise layer of the benchmark's other
# models changes, nor any from 40 to 64.
TRANSPOSE_COST = 40
# Without the other product to compare, the transposed one needs its columns this full: 48 channels in two
# 32-wide panels ran 1.3x the planar time at 27x27 and 13x13, 32 or 64 channels 0.95-1.02x.
TRANSPOSED_MIN_FILL = 0.9
# The kernels a pointwise product picks from without tuning, by float32 lanes. On AVX2 only 6x16: 4x16's
# eight accumulators leave the two FMA pipes waiting on latency, and it took 1.3-1.7x 6x16's time for the
# rows it fits better (Zen 3, C harness of the prepacked_a entry, alternating: 16x128x3025 1.65x, 16x64x3025
# 1.74x, 32x256x729 1.39x, 32x64x3136 1.28x, 8x64x3136 1.12x). The tuner still tries every kernel.
DEFAULT_KERNELS: dict[int, tuple[GemmKernel, ...]] = {**KERNELS_BY_LANES, 8: DEFAULT_KERNELS_BY_LANES[8]}


def is_pointwise(g: ConvGeometry, padding: tuple[int, ...]) -> bool:
    """A 2-d 1x1 convolution of stride 1 without padding: a matrix product per image and group."""
    return g.rank == 2 and g.kernel == (1, 1) and g.strides == (1, 1) and not any(padding)


def _padded_cost(kernel: GemmKernel, rows: int) -> float:
    """Rows the kernel computes for `rows` output channels (whole panels), plus the B-vector loads
    each panel row shares: the fewer rows a panel has, the more loads per multiply-add."""
    panels = -(-rows // kernel.mr)
    return panels * kernel.mr * (1 + 1 / kernel.mr)


def _fits(g: ConvGeometry, min_positions: int, max_depth: int, max_depth_large_maps: int) -> bool:
    positions = g.out_shape[2] * g.out_shape[3]
    depth = max_depth_large_maps if positions >= LARGE_MAP else max_depth
    return g.out_channels_per_group >= MIN_ROWS and positions >= min_positions and g.in_channels_per_group <= depth


def _default_kernel(kernels: tuple[GemmKernel, ...], rows: int) -> GemmKernel:
    return min(kernels, key=lambda k: _padded_cost(k, rows))  # min keeps the first of equals


def choose_pointwise_kernel(sched: ScheduleContext, g: ConvGeometry) -> GemmKernel | None:
    """The microkernel for a pointwise convolution on `sched`'s target, or None to keep the planar
    schedule (no AVX2/AVX-512 microkernel for the target, too few output channels per group or
    output positions, too many input channels per group)."""
    kernels = KERNELS_BY_LANES.get(float32_lanes(sched.target) or 0)
    if kernels is None or not _fits(g, MIN_POSITIONS, MAX_DEPTH, MAX_DEPTH_LARGE_MAPS):
        return None
    rows = g.out_channels_per_group
    best = _default_kernel(DEFAULT_KERNELS[float32_lanes(sched.target) or 0], rows)
    candidates = [{"mr": k.mr, "nr": k.nr} for k in kernels]
    description = {"out": list(g.out_shape), "in_per_group": g.in_channels_per_group, "out_per_group": rows}
    picked = sched.choose(WORKLOAD_OP, description, candidates, {"mr": best.mr, "nr": best.nr})
    return GemmKernel(picked["mr"], picked["nr"])


def prepacked_pointwise_kernel(target: Target, g: ConvGeometry) -> GemmKernel | None:
    """The microkernel whose MR a constant weight of a pointwise convolution is packed for at compile time
    to run with channels as rows (the default of `choose_pointwise_kernel`; packing fixes it, so no tuning),
    or None where that product does not run. The limits are PREPACKED_*: without the per-call packing of A
    they are looser."""
    kernels = DEFAULT_KERNELS.get(float32_lanes(target) or 0)
    if kernels is None or not _fits(g, PREPACKED_MIN_POSITIONS, PREPACKED_MAX_DEPTH, PREPACKED_MAX_DEPTH_LARGE_MAPS):
        return None
    return _default_kernel(kernels, g.out_channels_per_group)


def transposed_pointwise_kernel(target: Target, g: ConvGeometry) -> GemmKernel | None:
    """The microkernel for outᵀ = Xᵀ Wᵀ (positions as rows), or None where that product does not run:
    several groups, no microkernel for the target, fewer than MIN_ROWS output channels."""
    kernels = DEFAULT_KERNELS.get(float32_lanes(target) or 0)
    if kernels is None or g.out_shape[1] != g.out_channels_per_group or g.out_channels_per_group < MIN_ROWS:
        return None
    return _default_kernel(kernels, g.out_shape[2] * g.out_shape[3])


@dataclass(frozen=True, slots=True)
class PackedPointwise:
    """How PackGemmWeights packs a pointwise convolution's constant weight, and the kernel reading it."""

    kernel: GemmKernel
    transposed: bool
    """outᵀ = Xᵀ Wᵀ (`pointwise_conv_transposed`): the weight is Wᵀ's B micro-panels, NR wide; else the
    weight is each group's A micro-panels, MR high (`pointwise_conv`)."""


def _padded(n: int, block: int) -> int:
    return -(-n // block) * block


def product_cost(g: ConvGeometry, plan: PackedPointwise) -> int:
    """Multiply-adds `plan` computes, padding included, plus TRANSPOSE_COST per output element if transposed."""
    channels, depth = g.out_channels_per_group, g.in_channels_per_group
    positions, k = g.out_shape[2] * g.out_shape[3], plan.kernel
    if plan.transposed:
        return _padded(positions, k.mr) * _padded(channels, k.nr) * depth + TRANSPOSE_COST * positions * channels
    return _padded(channels, k.mr) * _padded(positions, k.nr) * depth


def prepacked_pointwise_plan(target: Target, g: ConvGeometry) -> PackedPointwise | None:
    """How a constant pointwise weight is packed, or None to leave it alone (the planar schedule runs): the
    cheaper product by `product_cost`, channels as rows (`prepacked_pointwise_kernel`) or positions as rows
    (`transposed_pointwise_kernel`); the latter alone only if it fills TRANSPOSED_MIN_FILL of its columns."""
    plans = []
    kernel = prepacked_pointwise_kernel(target, g)
    if kernel is not None:
        plans.append(PackedPointwise(kernel, transposed=False))
    kernel = transposed_pointwise_kernel(target, g)
    channels = g.out_channels_per_group
    if kernel is not None and (plans or channels >= TRANSPOSED_MIN_FILL * _padded(channels, kernel.nr)):
        plans.append(PackedPointwise(kernel, transposed=True))
    return min(plans, key=lambda p: product_cost(g, p)) if plans else None  # min keeps the first of equals


def pack_pointwise_weights(weight: np.ndarray, groups: int, mr: int) -> np.ndarray:
    """A pointwise convolution's weight (out, in / groups, 1, 1) as each group's A micro-panels
    (`pack_a_panels`): shape (groups, ceil(out / groups / mr), in / groups, mr)."""
    per_out = weight.shape[0] // groups
    matrices = weight.reshape(groups, per_out, weight.shape[1])
    return np.ascontiguousarray(np.stack([pack_a_panels(m, mr) for m in matrices]))


def unpack_pointwise_weights(packed: np.ndarray, channels: int) -> np.ndarray:
    """The inverse of `pack_pointwise_weights`: the weight (channels, in / groups, 1, 1)."""
    groups, _, per_in, _ = packed.shape
    per_out = channels // groups
    matrices = [unpack_b_panels(p, per_out).T for p in packed]  # A panels are Aᵀ's B panels
    return np.concatenate(matrices).reshape(channels, per_in, 1, 1)


def pointwise_conv_transposed(data: te.Tensor, wp: te.Tensor, g: ConvGeometry, kernel: GemmKernel) -> te.Tensor:
    """outᵀ = Xᵀ Wᵀ per image, positions as the microkernel's rows and output channels as its columns, into
    a (batch, positions, channels) scratch stage; then `TRANSPOSE` writes it as NCHW, where a fused epilogue
    runs in place. `wp` is Wᵀ's B micro-panels (`pack_pointwise_weights(weight, 1, kernel.nr)`)."""
    batch, out_channels, height, width = g.out_shape
    positions, depth = height * width, g.in_channels_per_group
    zero = E.IntImm(0)
    image = te.axis(batch, "n")

    def product(ins: tuple[Buffer, ...], rows: Buffer) -> S.Stmt:
        x, w = ins
        return te.call_extern(  # A[p, k] = x[n, k, p]: rows of stride 1, columns of stride `positions`
            kernel.prepacked_symbol, positions, out_channels, depth, te.pointer(x, image.var, zero, zero, zero),
            1, positions, te.pointer(w), te.pointer(rows, image.var, zero, zero), out_channels)

    rows = te.extern((batch, positions, out_channels), [data, wp], product, name="conv2d_gemm_rows",
                     loops=[image])
    same_image = te.axis(batch, "n")

    def transpose(ins: tuple[Buffer, ...], out: Buffer) -> S.Stmt:
        return te.call_extern(TRANSPOSE, positions, out_channels, te.pointer(ins[0], same_image.var, zero, zero),
                              te.pointer(out, same_image.var, zero, zero, zero))

    return te.extern(g.out_shape, [rows], transpose, name="conv2d_gemm", loops=[same_image])


def pointwise_conv(data: te.Tensor, weight: te.Tensor, g: ConvGeometry, kernel: GemmKernel,
                   prepacked: bool = False) -> te.Tensor:
    """out[n, c] = weight[c] . data[n, group(c)] as one microkernel call per (image, group); `prepacked`:
    `weight` is `pack_pointwise_weights`' layout for the kernel's MR."""
    batch, out_channels, height, width = g.out_shape
    positions = height * width
    per_out, per_in = g.out_channels_per_group, g.in_channels_per_group
    image, group = te.axis(batch, "n"), te.axis(out_channels // per_out, "g")
    zero = E.IntImm(0)

    def body(ins: tuple[Buffer, ...], out: Buffer, epilogue: GemmEpilogue | None) -> S.Stmt:
        x, w = ins
        n, gi = image.var, group.var  # loops of extent 1 become index 0 (te.extern's loop nest)
        first_out, first_in = E.mul(gi, per_out), E.mul(gi, per_in)
        c_index = (n, first_out, zero, zero)
        if prepacked:
            return gemm_call(kernel.prepacked_a_symbol, (per_out, positions, per_in, te.pointer(w, gi, zero, zero, zero),
                                                         te.pointer(x, n, first_in, zero, zero), positions, 1),
                             out, c_index, positions, epilogue)
        return gemm_call(kernel.symbol, (per_out, positions, per_in, te.pointer(w, first_out, zero, zero, zero), per_in,
                                         1, te.pointer(x, n, first_in, zero, zero), positions, 1),
                         out, c_index, positions, epilogue)

    # C's rows are output channels (of one group), its columns the positions
    return te.extern(g.out_shape, [data, weight], lambda ins, out: body(ins, out, None), name="conv2d_gemm",
                     loops=[image, group], gemm_output=GemmOutput((1,), (2, 3), body))
