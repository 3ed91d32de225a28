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
panels, not two 12-row ones); `tessera tune` may pick another.

The weights are the product's A operand, which the microkernel packs into
MR-row micro-panels on every call. A constant weight is packed once instead:
the PackGemmWeights pass stores it as `pack_pointwise_weights` lays it out
and the convolution becomes `nn.conv2d_pointwise_prepacked`, whose kernel
calls `ts_sgemm_<MR>x<NR>_prepacked_a` (only the input is packed at run
time). Packing B instead, by computing outᵀ = Xᵀ Wᵀ, would write C with a
column stride, which the microkernel's vector stores cannot do.
"""

from __future__ import annotations

from ... import te
import numpy as np

from ...target.simd import float32_lanes
from ...target.target import Target
from ...tir import expr as E
from ...tir import stmt as S
from ...tir.buffer import Buffer
from .conv_schedule import ConvGeometry
from .gemm import KERNELS_BY_LANES, MIN_ROWS, GemmKernel, pack_a_panels, unpack_b_panels
from ..schedule_context import ScheduleContext

WORKLOAD_OP = "conv2d_gemm"  # the operator named in tuning logs
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
# Limits for weights packed at compile time (`prepacked_pointwise_kernel`): the same. Prepacking made the
# GEMM calls 2-5% faster where they already ran, and 8-36% faster than the calls packing the weights on
# ResNet-50's 512-2048-channel convolutions, but those then only matched the planar schedule (1.02-1.05x
# its time; the microkernel still packs the input and re-reads C per K block). On small maps 7x7 broke
# even, 6x6 ran 1.16-1.22x slower (36 columns fill two 32-wide panels), 3x3 0.88-0.91x: no monotone
# rule, so no relaxation (AMD EPYC Zen 4, AVX-512, one thread, alternating runs of each shape).
PREPACKED_MIN_POSITIONS = MIN_POSITIONS
PREPACKED_MAX_DEPTH = MAX_DEPTH
PREPACKED_MAX_DEPTH_LARGE_MAPS = MAX_DEPTH_LARGE_MAPS


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
    best = _default_kernel(kernels, rows)
    candidates = [{"mr": k.mr, "nr": k.nr} for k in kernels]
    description = {"out": list(g.out_shape), "in_per_group": g.in_channels_per_group, "out_per_group": rows}
    picked = sched.choose(WORKLOAD_OP, description, candidates, {"mr": best.mr, "nr": best.nr})
    return GemmKernel(picked["mr"], picked["nr"])


def prepacked_pointwise_kernel(target: Target, g: ConvGeometry) -> GemmKernel | None:
    """The microkernel whose MR a constant weight of a pointwise convolution is packed for at compile time
    (the default of `choose_pointwise_kernel`; packing fixes it, so no tuning), or None to leave the weight
    alone. The limits are PREPACKED_*: without the per-call packing of A they are looser."""
    kernels = KERNELS_BY_LANES.get(float32_lanes(target) or 0)
    if kernels is None or not _fits(g, PREPACKED_MIN_POSITIONS, PREPACKED_MAX_DEPTH, PREPACKED_MAX_DEPTH_LARGE_MAPS):
        return None
    return _default_kernel(kernels, g.out_channels_per_group)


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


def pointwise_conv(data: te.Tensor, weight: te.Tensor, g: ConvGeometry, kernel: GemmKernel,
                   prepacked: bool = False) -> te.Tensor:
    """out[n, c] = weight[c] . data[n, group(c)] as one microkernel call per (image, group); `prepacked`:
    `weight` is `pack_pointwise_weights`' layout for the kernel's MR."""
    batch, out_channels, height, width = g.out_shape
    positions = height * width
    per_out, per_in = g.out_channels_per_group, g.in_channels_per_group
    image, group = te.axis(batch, "n"), te.axis(out_channels // per_out, "g")
    zero = E.IntImm(0)

    def body(ins: tuple[Buffer, ...], out: Buffer) -> S.Stmt:
        x, w = ins
        n, gi = image.var, group.var  # loops of extent 1 become index 0 (te.extern's loop nest)
        first_out, first_in = E.mul(gi, per_out), E.mul(gi, per_in)
        if prepacked:
            return te.call_extern(
                kernel.prepacked_a_symbol, per_out, positions, per_in, te.pointer(w, gi, zero, zero, zero),
                te.pointer(x, n, first_in, zero, zero), positions, 1,
                te.pointer(out, n, first_out, zero, zero), positions)
        return te.call_extern(
            kernel.symbol, per_out, positions, per_in,
            te.pointer(w, first_out, zero, zero, zero), per_in, 1,
            te.pointer(x, n, first_in, zero, zero), positions, 1,
            te.pointer(out, n, first_out, zero, zero), positions)

    return te.extern(g.out_shape, [data, weight], body, name="conv2d_gemm", loops=[image, group])
