"""`nn.conv2d_blocked`: a dense 2-d convolution vectorised across output channels, its constant weight
packed at compile time into blocks of output channels.

The planar schedule (`conv_schedule.planar_tiles`) vectorises output positions of flattened, padded
planes. On a small map most vectors are partly padding or past the map's end: a 7x7 map with a pitch
of 9 computes 64 positions for its 49 outputs (3x3 layers of ResNet-50's last stage ran at 0.75 of
onnxruntime's speed on an AVX-512 EPYC), an 8x8 map 80 for 64. Here a register tile is P outputs of
one row by CB output channels (two vectors): each multiply-add broadcasts one input element against
CB weights, contiguous in the packed weight. Only the last tile of a row may reach past its end (P is
chosen to waste least, `row_tile`): a 7x7 map computes 49 positions, or 56 with AVX2's tiles of 4.

`conv2d_blocked(data, wp, ...)` convolves NCHW `data` with the weight (OC, IC, KH, KW) stored as
`pack_blocked_weights(weight, CB)`: shape (OC / CB, IC, KH, KW, CB). The PackGemmWeights pass writes
it in place of `nn.conv2d(data, constant)` where `blocked_block` says the planar schedule would waste
lanes (`PLANAR_FILL_BELOW`). Like `nn.conv2d`, the op takes a fused elementwise tail: it runs in the
copy of the tiles into NCHW.
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
from ...te.lower import LOCAL_TILE_ELEMENTS
from ...tir import expr as E
from .._util import as_tensor, same_dtype
from ..registry import OpPattern, register_op
from ..schedule_context import ScheduleContext
from .conv import ConvAttrs, conv_output_size, conv_reference
from .conv_planes import plane_copy
from .conv_schedule import VECTOR_REGISTERS, WIDTH_CANDIDATES, pad_input

# use the blocked schedule where the planar one fills less than this share of its lanes with outputs
# (3x3 layers on an AVX-512 EPYC, blocked/planar time: 7x7 and 8x8 maps 0.8, 14x14 0.85, 28x28 (planar fill
# 0.91) and 56x56 stride 2 (0.94) 0.93; 56x56 (0.96) 1.0; ResNet-50's 7x7 stem (0.97) 1.06)
PLANAR_FILL_BELOW = 0.95
# output channels per block in vectors, and the outputs per tile tried (fewer than 8 accumulators leave
# the multiply-add latency exposed), by float32 lanes. AVX-512's 32 registers hold 6-8 outputs x 2
# vectors of accumulators. AVX2's 16 hold 4 x 2: measured against the planar tiles on a Zen 4 at
# -mcpu=x86-64-v3, 4 x 2 ran 0.8-0.9x their time, 5 x 2 1.2x, 7 x 2 (spilling) 1.4x, and tiles of one
# vector (7 x 1) 5-15x (gcc 12 vectorised them across outputs, with shuffles)
BLOCK_VECTORS = {16: 2, 8: 2}
ROW_TILES = {16: (6, 7, 8), 8: (4,)}
TUNED_ROW_TILES = range(4, 9)  # what the tuner may try instead (those that fit the registers)
# blocked only where its tiles fill at least this much more of their lanes than the planar ones: at
# equal fill the planar tiles ran ~4% faster on 56x56 maps (AVX-512), and on a 32x32 map of 16 channels
# (AVX2: 0.94 of the planar lanes filled) 8% faster
FILL_MARGIN = 1.08


@dataclass(frozen=True)
class BlockedConvAttrs:
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]


def pack_blocked_weights(weight: np.ndarray, block: int) -> np.ndarray:
    """(OC, IC, KH, KW) -> (OC / block, IC, KH, KW, block): a block's weights for one tap contiguous."""
    oc = weight.shape[0]
    if oc % block:
        raise ValueError(f"{oc} output channels do not split into blocks of {block}")
    blocked = weight.reshape(oc // block, block, *weight.shape[1:])
    return np.ascontiguousarray(np.moveaxis(blocked, 1, -1))


def unpack_blocked_weights(packed: np.ndarray) -> np.ndarray:
    blocks, ic, kh, kw, block = packed.shape
    return np.moveaxis(packed, -1, 1).reshape(blocks * block, ic, kh, kw)


def row_tile(out_width: int, block: int, lanes: int) -> int | None:
    """Outputs per tile along a row (P): of the ROW_TILES that fit (`fits_registers`), the one computing
    fewest columns past the row's end (the last tile's), the larger on a tie; None where none fits."""
    fitting = [p for p in ROW_TILES.get(lanes, ()) if fits_registers(p, block, lanes)]
    return min(fitting, key=lambda p: (_row_tiles(out_width, p) * p, -p), default=None)


def fits_registers(row: int, block: int, lanes: int) -> bool:
    """Whether `row` x `block` accumulators fit the register file beside the block's weight vectors and a
    broadcast (and the lowering keeps a tile that size in a local array)."""
    registers = VECTOR_REGISTERS.get(lanes)
    vectors = block // lanes
    return registers is not None and row * vectors + vectors + 1 <= registers and row * block <= LOCAL_TILE_ELEMENTS


def _row_tiles(out_width: int, row: int) -> int:
    return -(-out_width // row)


def blocked_fill(out_width: int, row: int) -> float:
    """The share of the positions the blocked tiles compute that are outputs."""
    return out_width / (_row_tiles(out_width, row) * row)


def planar_fill(in_spatial: Sequence[int], out_spatial: Sequence[int], strides: Sequence[int],
                padding: Sequence[int], lanes: int) -> float:
    """The share of the positions the planar schedule's default tiles compute that are outputs."""
    oh, ow = out_spatial
    pitch = -(-(in_spatial[1] + padding[1] + padding[3]) // strides[1])
    width = min(max(2 * lanes, min(WIDTH_CANDIDATES)), max(WIDTH_CANDIDATES))
    width = width if oh * ow >= 3 * width else min(WIDTH_CANDIDATES)
    computed = -(-(oh * pitch) // width) * width
    return oh * ow / computed


def blocked_block(target: Target, in_spatial: Sequence[int], out_channels: int, out_spatial: Sequence[int],
                  kernel: Sequence[int], attrs: ConvAttrs) -> int | None:
    """The output channels per block (CB) to pack a float32 convolution's weight in for `target`, or None
    where the planar schedule stays: grouped, dilated or 1x1 convolutions, channels CB does not divide,
    rows without a fitting tile, and maps the planar tiles fill well."""
    lanes = float32_lanes(target)
    if lanes is None or lanes not in BLOCK_VECTORS:
        return None
    block = BLOCK_VECTORS[lanes] * lanes
    if attrs.groups != 1 or any(d != 1 for d in attrs.dilation) or tuple(kernel) == (1, 1) or out_channels % block:
        return None
    row = row_tile(out_spatial[1], block, lanes)
    if row is None:
        return None
    fill = planar_fill(in_spatial, out_spatial, attrs.strides, attrs.padding, lanes)
    return block if fill < PLANAR_FILL_BELOW and blocked_fill(out_spatial[1], row) >= FILL_MARGIN * fill else None


def _type(types: tuple[Type, ...], attrs: BlockedConvAttrs) -> Type:
    data, wp = as_tensor(types[0], "data"), as_tensor(types[1], "packed weight")
    dtype = same_dtype([data, wp], "conv2d_blocked operands")
    if data.ndim != 4 or wp.ndim != 5:
        raise TypeInferenceError(f"conv2d_blocked needs NCHW data and a packed weight (OC / CB, IC, KH, KW, CB), "
                                 f"got {data.shape} and {wp.shape}")
    blocks, ic, kh, kw, block = wp.shape
    if data.shape[1] != ic:
        raise TypeInferenceError(f"{data.shape[1]} input channels do not fit a packed weight {wp.shape}")
    spatial = []
    for k, (size, taps) in enumerate(zip(data.shape[2:], (kh, kw))):
        out = conv_output_size(size, taps, attrs.strides[k], attrs.dilation[k], attrs.padding[k], attrs.padding[2 + k])
        if out < 1:
            raise TypeInferenceError(f"output size {out} < 1 in spatial dim {k}")
        spatial.append(out)
    return TensorType((data.shape[0], blocks * block, *spatial), dtype)


def _reference(args: list[np.ndarray], attrs: BlockedConvAttrs) -> np.ndarray:
    x, wp = args
    return conv_reference([x, unpack_blocked_weights(wp)], ConvAttrs(attrs.strides, attrs.padding, attrs.dilation))


def blocked_conv(data: te.Tensor, wp: te.Tensor, attrs: BlockedConvAttrs, out_shape: tuple[int, ...],
                 row: int) -> te.Tensor:
    """Tiles t[n, cb, y, xb, xi, ci] (output channel cb*CB + ci at row y, column xb*P + xi), each
    `row` (P) columns by CB channels, reduced over input channels and taps outside them, then copied
    into NCHW (where fused epilogues run)."""
    blocks, ic, kh, kw, block = wp.shape
    n_, _, oh, ow = out_shape
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    top, left, bottom, right = attrs.padding
    tiles_per_row = _row_tiles(ow, row)
    right += (tiles_per_row * row - ow) * sw  # the columns the last tile of a row reads past the row
    if isinstance(data.op, te.PlaceholderOp):
        # a kernel input: copied by loops bounded by the padding, which gcc vectorises (see conv_planes)
        shape = (n_, ic, 1, 1, data.shape[2] + top + bottom, data.shape[3] + left + right)
        planes = plane_copy(data, shape, (top, left), (1, 1), "planes")
        padded = lambda *i: planes[(*i[:2], 0, 0, *i[2:])]  # noqa: E731
    else:  # a computed input (e.g. a fused producer) is inlined into the select of the padding
        padded_tensor = pad_input(data, (top, left), (bottom, right), 0.0, materialize=True)
        padded = lambda *i: padded_tensor[i]  # noqa: E731
    rc, rkh, rkw = te.reduce_axis(ic, "rc"), te.reduce_axis(kh, "rk0"), te.reduce_axis(kw, "rk1")

    def element(n: E.Var, cblock: E.Var, y: E.Var, xb: E.Var, xi: E.Var, ci: E.Var) -> E.PrimExpr:
        h = E.add(E.mul(y, sh), E.mul(rkh.var, dh))
        w = E.add(E.mul(E.add(E.mul(xb, row), xi), sw), E.mul(rkw.var, dw))
        return te.sum(E.mul(padded(n, rc.var, h, w), wp[cblock, rc.var, rkh.var, rkw.var, ci]), [rc, rkh, rkw])

    tiles = te.compute((n_, blocks, oh, tiles_per_row, row, block), element, name="conv2d",
                       axis_names=["n", "cb", "y", "xb", "xi", "ci"],
                       loop_order=["n", "cb", "y", "xb", "rc", "rk0", "rk1", "xi", "ci"],
                       register_tile=True, unroll=["rk1"])

    def untile(n: E.Var, c: E.Var, y: E.Var, x: E.Var) -> E.PrimExpr:
        # column x of row y is element x of the row's tiles, whatever its tile (flat offset: the
        # lowering indexes buffers by flat offset, so an index past an axis's extent runs on)
        return tiles[n, E.floordiv(c, block), y, 0, x, E.floormod(c, block)]

    return te.compute(out_shape, untile, name="conv2d_out", axis_names=["n", "c", "o0", "o1"])


def choose_row_tile(sched: ScheduleContext, data: te.Tensor, wp_shape: tuple[int, ...],
                    out_shape: tuple[int, ...], attrs: BlockedConvAttrs) -> int:
    """The knob `conv2d_blocked`: outputs per tile along a row, {"row": P}, any of TUNED_ROW_TILES that fit
    the target's registers; `row_tile`'s unless the tuner measured better. 1 (tiles of one column, still
    correct) for a target the pass would not have packed this block for."""
    block = wp_shape[-1]
    lanes = float32_lanes(sched.target) or 0
    default = row_tile(out_shape[3], block, lanes) if lanes and block % lanes == 0 else None
    if default is None:
        return 1
    candidates = [{"row": p} for p in TUNED_ROW_TILES if fits_registers(p, block, lanes)]
    description = {"in": list(data.shape), "out": list(out_shape), "kernel": list(wp_shape[2:4]),
                   "strides": list(attrs.strides), "padding": list(attrs.padding), "dilation": list(attrs.dilation),
                   "block": block}
    work = math.prod(out_shape) * wp_shape[1] * wp_shape[2] * wp_shape[3]
    return sched.choose("conv2d_blocked", description, candidates, {"row": default}, work=work)["row"]


def _compute(inputs: list[te.Tensor], attrs: BlockedConvAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    data, wp = inputs
    row = choose_row_tile(sched, data, tuple(wp.shape), tuple(out.shape), attrs)
    return blocked_conv(data, wp, attrs, tuple(out.shape), row)


conv2d_blocked = register_op(
    "nn.conv2d_blocked", type_rel=_type, reference=_reference, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    compute=_compute, attrs=BlockedConvAttrs, num_inputs=2,
    doc="NCHW data convolved with a weight packed in blocks of output channels (OC / CB, IC, KH, KW, CB).",
)


__all__ = ("BlockedConvAttrs", "blocked_block", "blocked_conv", "choose_row_tile", "conv2d_blocked", "fits_registers",
           "pack_blocked_weights", "row_tile", "unpack_blocked_weights")
