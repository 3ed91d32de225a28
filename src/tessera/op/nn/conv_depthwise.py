"""Depthwise 2-d float32 convolutions as calls of a channel-blocked kernel, on AVX2 and AVX-512 hosts.

The planar schedule vectorises a depthwise convolution along its flattened
padded plane, and on small maps most of that work is overhead: KWS's 25x5
maps spent a third of their 7.5 us copying 64 planes of 7-wide rows with
a select per element, a fifth copying tiles back, and the rest in chains
of two accumulators over unaligned loads (192 positions computed for 125
outputs); VWW's 3x3 maps computed 16 positions for 9. Vectors across
channels waste nothing on the width: `ts_depthwise2d_float32` (C text in
`tessera.codegen.c_depthwise`) transposes eight channels into a padded
scratch of position vectors, accumulates eight positions at a time (eight
independent chains, aligned loads) and transposes the results back.
Maps too large for the scratch run in bands of output rows. The
convolution's elementwise tail (bias, ReLU, Clip, a residual add) runs in
the kernel on each run of outputs before it is stored, where
`tessera.te.gemm_epilogue` can read it as a program; other tails (SiLU,
hard-swish) are a second pass over the NCHW output.
Other targets (SSE-only x86-64, Arm, Cortex-M) keep the planar schedule.
"""

from __future__ import annotations

import math

from ... import te
from ...target.simd import float32_lanes
from ...te.gemm_epilogue import GemmEpilogue, GemmOutput, no_epilogue_arguments
from ...te.parallel import PARALLEL_MIN_WORK
from ...tir import expr as E
from ...tir import stmt as S
from ...tir.buffer import Buffer
from ..schedule_context import ScheduleContext
from .conv_schedule import ConvGeometry

DEPTHWISE_SYMBOL = "ts_depthwise2d_float32"
WORKLOAD_OP = "conv2d_depthwise"  # the operator named in tuning logs (the knob: kernel or planar schedule)
DEPTHWISE_BLOCK = 8  # channels per call: one ymm of float32 (the C text's vector type)
MIN_LANES = 8  # AVX2 and up: narrower targets keep the planar schedule (and their C)
# position vectors of the kernel's stack scratch (a band's padded input rows plus its outputs), at most:
# 256 KiB, as the GEMM's stack block, so maps up to 62x62 (7x7, stride 1) run in one band. Against the
# planar schedule (AMD EPYC Zen 4, one thread, with a bias + ReLU tail): 0.4-0.96x on VWW's and KWS's
# maps, 0.65x MobileNet's 112x112 stride 2, 0.73x ConvNeXt's 56x56 7x7, 1.01x MobileNet's 56x56 3x3
# (0.71x on the AVX2 path); bands of 24 KiB, within L1, were no faster overall.
MAX_SCRATCH_VECTORS = 8192
# with AVX-512 (16 lanes), 3x3 kernels of stride 1 with this many output positions keep the planar schedule
WIDE_VECTOR_LANES = 16
SMALL_KERNEL_TAPS = 9
PLANAR_MIN_POSITIONS = 2048


def scratch_vectors(g: ConvGeometry, band: int) -> int:
    """The position vectors the kernel keeps on its stack for `band` output rows at a time."""
    out_w = g.out_shape[3]
    rows = (band - 1) * g.strides[0] + (g.kernel[0] - 1) * g.dilation[0] + 1
    pitch = (out_w - 1) * g.strides[1] + (g.kernel[1] - 1) * g.dilation[1] + 1
    return rows * pitch + -(-band * out_w // DEPTHWISE_BLOCK) * DEPTHWISE_BLOCK


def band_rows(g: ConvGeometry) -> int:
    """Output rows per band: as many as the scratch holds (0: not even one row fits)."""
    return max((r for r in range(1, g.out_shape[2] + 1) if scratch_vectors(g, r) <= MAX_SCRATCH_VECTORS), default=0)


def runs_depthwise(g: ConvGeometry, dtype: str, sched: ScheduleContext) -> bool:
    """Whether the kernel can compute `g`: a 2-d float32 depthwise convolution (one input and one output
    channel per group) on a target with vectors of eight float32 or more, one output row of which fits
    the kernel's scratch."""
    return (g.rank == 2 and dtype == "float32" and g.in_channels_per_group == 1 and g.out_channels_per_group == 1
            and (float32_lanes(sched.target) or 0) >= MIN_LANES and band_rows(g) > 0)


def fits_depthwise(g: ConvGeometry, dtype: str, sched: ScheduleContext) -> bool:
    """The default: the kernel wherever it runs, except with 16-lane vectors on a large map of stride 1
    and at most 3x3 taps, where the planar schedule's wide tiles keep up and its copy-out runs the
    epilogue while the tiles are in cache (measured when the kernel's tail was always a second pass:
    MobileNet's 56x56 layers 3-8% slower with ReLU6 and hard-swish, though 10% faster with SiLU). Measured
    again with the kernel running bias, ReLU and ReLU6 itself (2-core Zen 4, the kernel everywhere against
    this rule, one thread, 10 rounds, medians): mobilenet_v2_block 1.07x the time, mobilenet_v3_block 1.07x,
    but efficientnet_block 0.96x (its SiLU, a pass either way, reads the planar schedule's pitched scratch
    more slowly) and vww_mobilenet 0.96-1.01x: the rule stands, as the schedule does not see the tail.
    With SiLU's cheaper denominator (c_fast_math), efficientnet_block too is faster this way: 1.05x the
    time with the kernel at one thread, 1.02x at two (exported libraries alternating, 10 rounds, medians)."""
    if not runs_depthwise(g, dtype, sched):
        return False
    planar_wins = ((float32_lanes(sched.target) or 0) >= WIDE_VECTOR_LANES and g.strides == (1, 1)
                   and math.prod(g.kernel) <= SMALL_KERNEL_TAPS and math.prod(g.out_shape[2:]) >= PLANAR_MIN_POSITIONS)
    return not planar_wins


def choose_depthwise(g: ConvGeometry, dtype: str, sched: ScheduleContext) -> bool:
    """Whether to call the kernel for `g`: `fits_depthwise`'s answer, or the tuning log's (`tessera tune`
    measures both schedules wherever the kernel runs)."""
    if not runs_depthwise(g, dtype, sched):
        return False
    default = {"channel_blocked": int(fits_depthwise(g, dtype, sched))}
    candidates = [{"channel_blocked": 1}, {"channel_blocked": 0}]
    description = {"in": list(g.in_spatial), "out": list(g.out_shape), "kernel": list(g.kernel),
                   "strides": list(g.strides), "dilation": list(g.dilation)}
    picked = sched.choose(WORKLOAD_OP, description, candidates, default, work=g.multiply_adds)
    return bool(picked["channel_blocked"])


def depthwise_conv(data: te.Tensor, weight: te.Tensor, g: ConvGeometry, begins: tuple[int, ...]) -> te.Tensor:
    """out[n, c] = data[n, c] convolved with weight[c, 0] (padding `begins` before each spatial dim, and
    whatever the output size implies after), one kernel call per image and block of channels."""
    batch, channels, out_h, out_w = g.out_shape
    height, width = data.shape[2:]
    blocks = -(-channels // DEPTHWISE_BLOCK)
    image, block = te.axis(batch, "n"), te.axis(blocks, "cb")
    sizes = (height, width, out_h, out_w, *g.kernel, *g.strides, *g.dilation, *begins, band_rows(g))

    def body(ins: tuple[Buffer, ...], out: Buffer, epilogue: GemmEpilogue | None) -> S.Stmt:
        x, w = ins
        first = E.mul(block.var, DEPTHWISE_BLOCK)
        # the last block takes what is left (channels need not be a multiple of the block)
        count = (E.minimum(E.sub(channels, first), DEPTHWISE_BLOCK) if channels % DEPTHWISE_BLOCK
                 else E.IntImm(DEPTHWISE_BLOCK))
        out_index = (image.var, first, 0, 0)
        tail = no_epilogue_arguments() if epilogue is None else epilogue.arguments(out_index)
        return te.call_extern(DEPTHWISE_SYMBOL, count, *sizes, te.pointer(x, image.var, first, 0, 0),
                              te.pointer(w, first, 0, 0, 0), te.pointer(out, *out_index), *tail)

    # threads only for work that pays for a fork and join (as a stage's outer loop); the tail's C is a
    # block's channels (rows, C's leading dimension a plane) by the plane's positions (columns)
    parallel = g.multiply_adds >= PARALLEL_MIN_WORK
    return te.extern(g.out_shape, [data, weight], lambda ins, out: body(ins, out, None), name="conv2d_depthwise",
                     loops=[image, block], parallel=parallel, gemm_output=GemmOutput((1,), (2, 3), body, map_last=True))
