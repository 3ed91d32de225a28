"""Loop schedules shared by the convolution-like kernels (conv, conv_transpose).

All keep the reduce axes (input channels, kernel taps) outside the output's
spatial loops, so the innermost loop walks contiguous output elements and gcc
vectorises it as a scalar-times-vector multiply-add.

* Planar (every 2-d convolution, depthwise and grouped included): register
  tiles over flattened, stride-phased image planes; see `planar_conv`.
  Dilated ones whose taps mostly read padding are split into regions that
  skip those taps (`conv_regions`), each region through `planar_tiles`.
  Wide planes are copied by loops bounded by the padding (`conv_planes`);
  one-channel (depthwise) tiles are up to eight vectors wide.
* Tiled (1-d and 3-d): the output is computed in tiles of a few output
  channels by a few outputs along the last spatial dim. The tile is small,
  so the lowering accumulates it in a local array, which gcc keeps in
  registers: a register-blocked micro-kernel that loads each input vector
  once for several output channels and writes every output once. The tiles
  are then copied into the NC[D]HW output, and fused epilogues (bias, ReLU,
  batch-norm scale) run in that copy. A strided convolution first regroups
  the input's last dim by phase, so its reads stay contiguous.
* Rows: 1-d and 3-d kernels whose groups hold a single output channel
  (depthwise), and int8 convolutions: the reduction updates whole output
  rows in place.

Tile sizes and the planar loop order are tuning knobs: the compute's
ScheduleContext answers them (`ConvGeometry.scheduled`), with defaults that
follow the target's vector width, or what `tessera tune` measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ... import te
from ...target.simd import float32_lanes
from ...target.target import Target
from ...te.lower import LOCAL_TILE_ELEMENTS
from ...tir import expr as E
from ..schedule_context import ScheduleContext
from .conv_planes import plane_copy

TILE_WIDTH = 32  # default outputs per tile where the vector width is unknown (two AVX-512 vectors)
TILE_CHANNELS = (8, 4, 2)  # default output channels per tile: the first that divides a group
# what the tuner may try instead (see tessera.tune)
WIDTH_CANDIDATES = (16, 32)  # 8 measured 4-8x slower: gcc then keeps the tile in memory
CHANNEL_CANDIDATES = (16, 8, 4, 2)
# tiles of one output channel (depthwise): widths tried, and the default's vectors of accumulators
SINGLE_CHANNEL_WIDTHS = (16, 32, 64, 128)
SINGLE_CHANNEL_VECTORS = 8
SPLIT_ROWS_PITCH = 16  # plane rows at least this wide are copied by loops split at the padding
CORTEX_M_TILE_CHANNELS = (16, 8, 4, 2)  # default output channels per tile on Cortex-M (scalar FPU)
# vector registers by float32 lanes, where the lanes say which x86 register file it is (AVX-512: 32 zmm,
# AVX/AVX2: 16 ymm); 4 lanes may be SSE (16) or NEON (32), so no budget there
VECTOR_REGISTERS = {16: 32, 8: 16}

# weight(c, rc, taps) -> the weight of output channel c, input channel rc
# (within the group) and kernel position `taps`.
WeightReader = Callable[[E.PrimExpr, E.PrimExpr, Sequence[E.PrimExpr]], E.PrimExpr]


@dataclass(frozen=True)
class ConvGeometry:
    """What the schedules need to know about a convolution."""

    out_shape: tuple[int, ...]  # N, OC, spatial...
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    in_channels_per_group: int
    out_channels_per_group: int
    # (output channels, width) per register tile, and whether the loop over
    # positions runs outside the loop over channel blocks; None: not chosen yet
    tile: tuple[int, int, int] | None = None
    in_spatial: tuple[int, ...] = ()  # input spatial size (for the loop-order default), if known
    workload_op: str = ""  # the operator named in tuning logs (default conv<rank>d)

    def scheduled(self, sched: ScheduleContext) -> "ConvGeometry":
        """This geometry with its register tile chosen: `sched`'s answer for the workload
        (forced by the tuner, from the tuning log, or the target's default)."""
        return self if self.tile is not None else replace(self, tile=self._choose_tile(sched))

    def _choose_tile(self, sched: ScheduleContext) -> tuple[int, int, int]:
        channels = [c for c in CHANNEL_CANDIDATES if self.out_channels_per_group % c == 0] or [1]
        # Stream whichever of input and weights is larger from the outer loop
        # only once: positions outside when the input outweighs the weights.
        in_elems = math.prod(self.in_spatial or self.out_shape[2:]) * self.in_channels_per_group
        weight_elems = self.out_channels_per_group * self.in_channels_per_group * math.prod(self.kernel)
        width = self._default_width(float32_lanes(sched.target))
        preferred: tuple[int, ...] = TILE_CHANNELS
        if _is_cortex_m(sched.target):
            # measured with `tessera tune --board mps2-an386`: 16 channels x 16 positions won every
            # float convolution of kws_ds_cnn and ic_resnet8 (the FPU's 32 registers, no vectors)
            width, preferred = min(WIDTH_CANDIDATES), CORTEX_M_TILE_CHANNELS
        positions_outer = int(in_elems > weight_elems)
        widths: tuple[int, ...] = WIDTH_CANDIDATES
        lanes = float32_lanes(sched.target)
        if channels == [1] and self.planar() and lanes:
            # A one-channel tile (depthwise) has one accumulator per vector, each a chain of dependent
            # multiply-adds: two vectors leave the FMA units waiting on latency, eight keep them busy.
            # Channel by channel, each plane streams once (measured ~20% faster than positions outside
            # on MobileNet's 56x56 depthwise; small maps keep the two-vector default).
            widths = SINGLE_CHANNEL_WIDTHS
            if self._single_channel_width(lanes) > width:
                width, positions_outer = self._single_channel_width(lanes), 0
        fitting = [c for c in preferred if c in channels and _fits_registers(c, width, lanes)]
        default = {"channels": (fitting or [c for c in preferred if c in channels] or [1])[0], "width": width,
                   "positions_outer": positions_outer}
        candidates = [{"channels": c, "width": w, "positions_outer": o} for c in channels for w in widths
                      for o in ((0, 1) if self.planar() else (default["positions_outer"],))
                      if c * w <= LOCAL_TILE_ELEMENTS]
        # the input size too: with the padding it sets the planes' pitch, so the best tile
        description = {"in": list(self.in_spatial), "out": list(self.out_shape), "kernel": list(self.kernel),
                       "strides": list(self.strides),
                       "dilation": list(self.dilation), "in_per_group": self.in_channels_per_group,
                       "out_per_group": self.out_channels_per_group}
        picked = sched.choose(self.workload_op or f"conv{self.rank}d", description, candidates, default,
                              work=self.multiply_adds)
        return picked["channels"], picked["width"], picked["positions_outer"]

    def _default_width(self, lanes: int | None) -> int:
        """Two vector registers of `lanes` float32 positions (TILE_WIDTH where the vector width is
        unknown), narrower where the output positions would fill less than half the last tile."""
        width = min(max(2 * lanes, min(WIDTH_CANDIDATES)), max(WIDTH_CANDIDATES)) if lanes else TILE_WIDTH
        positions = math.prod(self.out_shape[2:])
        return width if positions >= 3 * width else min(WIDTH_CANDIDATES)

    def _single_channel_width(self, lanes: int) -> int:
        """Up to SINGLE_CHANNEL_VECTORS vectors of `lanes` positions, as many as the output fills at
        least three tiles of (the last tile's unused positions are computed too)."""
        positions = math.prod(self.out_shape[2:])
        fitting = [w for w in SINGLE_CHANNEL_WIDTHS if w <= SINGLE_CHANNEL_VECTORS * lanes and positions >= 3 * w]
        return max(fitting, default=min(SINGLE_CHANNEL_WIDTHS))

    @property
    def multiply_adds(self) -> int:
        """The convolution's multiply-adds (how much tuning it deserves)."""
        return math.prod(self.out_shape) * self.in_channels_per_group * math.prod(self.kernel)

    @property
    def chosen_tile(self) -> tuple[int, int, int]:
        if self.tile is None:
            raise ValueError("the register tile is not chosen yet: use ConvGeometry.scheduled(sched)")
        return self.tile

    @property
    def tile_width(self) -> int:
        return self.chosen_tile[1]

    @property
    def positions_outer(self) -> bool:
        return bool(self.chosen_tile[2])

    @property
    def rank(self) -> int:
        return len(self.kernel)

    @property
    def grouped(self) -> bool:
        return self.out_shape[1] != self.out_channels_per_group

    def tile_channels(self) -> int:
        """Output channels per tile (a tile never straddles two groups), 1 if none fits."""
        return self.chosen_tile[0]

    def planar(self) -> bool:
        """2-d convolutions run on flattened planes (see `planar_conv`), depthwise ones included."""
        return self.rank == 2

    def tile_overhang(self) -> int:
        """Extra input columns (at the end of the last dim) the last tile reads."""
        if self.planar():
            return 0  # the planes carry their own tail
        blocks = -(-self.out_shape[-1] // self.tile_width)
        return (blocks * self.tile_width - self.out_shape[-1]) * self.strides[-1]

    def uses_tiles(self) -> bool:
        return self.tile_channels() > 1

    def input_channel(self, c: E.PrimExpr, rc: E.PrimExpr) -> E.PrimExpr:
        if not self.grouped:
            return rc
        group = E.floordiv(c, self.out_channels_per_group)
        return E.add(E.mul(group, self.in_channels_per_group), rc)


def _fits_registers(channels: int, width: int, lanes: int | None) -> bool:
    """Whether a tile of `channels` x `width` accumulators leaves registers for the input vectors it
    multiplies and one broadcast weight. With AVX2's 16 registers, 8 channels x 2 vectors (16
    accumulators) spilled on every tap: 4 x 2 ran ~1.5x faster on 3x3 convolutions (Zen 4, -mcpu=x86-64-v3)."""
    registers = VECTOR_REGISTERS.get(lanes or 0)
    if registers is None:
        return True  # unknown register file: keep the default
    vectors = -(-width // lanes) if lanes else 1
    return channels * vectors + vectors + 1 <= registers


def _is_cortex_m(target: Target) -> bool:
    return str(target.get("mcpu") or "").startswith("cortex-m")


def pad_input(data: te.Tensor, begins: tuple[int, ...], ends: tuple[int, ...], value: float,
              materialize: bool) -> te.Tensor:
    """`data` padded on its trailing spatial dims (leading dims untouched)."""
    if not any(begins) and not any(ends):
        return data
    lead = data.ndim - len(begins)
    shape = tuple(data.shape[:lead]) + tuple(
        data.shape[lead + k] + begins[k] + ends[k] for k in range(len(begins))
    )

    def element(*i: E.Var) -> E.PrimExpr:
        inside: E.PrimExpr = E.IntImm(1, "bool")
        src: list[E.PrimExpr] = list(i[:lead])
        for k, b in enumerate(begins):
            idx = i[lead + k]
            size = data.shape[lead + k]
            if b or ends[k]:
                inside = E.logical_and(inside, E.logical_and(E.ge(idx, b), E.lt(idx, b + size)))
            # Clamp so the read stays in bounds even where the select discards it.
            src.append(E.minimum(E.maximum(E.sub(idx, b), 0), size - 1) if b or ends[k] else idx)
        return E.select(inside, data[tuple(src)], E.const(value, data.dtype))

    names = [f"i{k}" for k in range(data.ndim)]
    return te.compute(shape, element, name="pad", axis_names=names, materialize=materialize)


def phase_split(padded: te.Tensor, stride: int) -> te.Tensor:
    """The last dim regrouped by position modulo `stride`: x[..., i] sits at
    [..., i % stride, i // stride], so a strided reader walks a phase contiguously."""
    size = padded.shape[-1]
    shape = tuple(padded.shape[:-1]) + (stride, -(-size // stride))

    def element(*i: E.Var) -> E.PrimExpr:
        src = E.add(E.mul(i[-1], stride), i[-2])
        value = padded[(*i[:-2], E.minimum(src, size - 1))]
        return E.select(E.lt(src, size), value, E.const(0, padded.dtype))

    return te.compute(shape, element, name="phases", materialize=True)


def conv_schedule(padded: te.Tensor, weight: WeightReader, g: ConvGeometry, name: str) -> te.Tensor:
    """out[n, c, *o] = sum over rc, taps of padded[n, in(c, rc), o*s + tap*dil] * weight(c, rc, taps).

    `padded` must be padded for the convolution and, when `g.uses_tiles()`,
    by `g.tile_overhang()` more columns at the end of its last dim. 2-d
    tiled convolutions (`g.planar()`) go through `planar_conv` instead.
    """
    if g.uses_tiles():
        return _tiled(padded, weight, g, name)
    return row_conv(padded, weight, g, name)


def _reduce_axes(g: ConvGeometry) -> tuple[te.IterVar, list[te.IterVar]]:
    return te.reduce_axis(g.in_channels_per_group, "rc"), [te.reduce_axis(k, f"rk{j}") for j, k in enumerate(g.kernel)]


def row_conv(padded: te.Tensor, weight: WeightReader, g: ConvGeometry, name: str) -> te.Tensor:
    """The rows schedule (no register tile): the reduction updates whole output rows in place.
    `padded` is padded for the convolution; `weight` reads any dtype the product should have."""
    d = g.rank
    rc, rk = _reduce_axes(g)
    spatial_names = [f"o{k}" for k in range(d)]

    def element(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        idx = [E.add(E.mul(pos[k], g.strides[k]), E.mul(rk[k].var, g.dilation[k])) for k in range(d)]
        a = padded[(n, g.input_channel(c, rc.var), *idx)]
        return te.sum(E.mul(a, weight(c, rc.var, [r.var for r in rk])), [rc, *rk])

    order = ["n", "c", "rc", *(r.name for r in rk), *spatial_names]
    return te.compute(g.out_shape, element, name=name, axis_names=["n", "c", *spatial_names], loop_order=order)


def _tiled(padded: te.Tensor, weight: WeightReader, g: ConvGeometry, name: str) -> te.Tensor:
    """Tiles t[n, cb, *o[:-1], wb, ci, wi] with c = cb*CB + ci and o[-1] = wb*W + wi."""
    d, cb, width = g.rank, g.tile_channels(), g.tile_width
    stride = g.strides[-1]
    source = phase_split(padded, stride) if stride > 1 else padded
    rc, rk = _reduce_axes(g)
    outer = [f"o{k}" for k in range(d - 1)]

    def element(n: E.Var, cblock: E.Var, *rest: E.Var) -> E.PrimExpr:
        *pos, wb, ci, wi = rest
        c = E.add(E.mul(cblock, cb), ci)
        idx = [E.add(E.mul(pos[k], g.strides[k]), E.mul(rk[k].var, g.dilation[k])) for k in range(d - 1)]
        column = E.add(E.mul(wb, width), wi)
        tap = E.mul(rk[-1].var, g.dilation[-1])
        channel = g.input_channel(E.mul(cblock, cb), rc.var)  # one group per tile
        if stride > 1:
            a = source[(n, channel, *idx, E.floormod(tap, stride), E.add(column, E.floordiv(tap, stride)))]
        else:
            a = source[(n, channel, *idx, E.add(column, tap))]
        return te.sum(E.mul(a, weight(c, rc.var, [r.var for r in rk])), [rc, *rk])

    blocks = -(-g.out_shape[-1] // width)
    shape = (g.out_shape[0], g.out_shape[1] // cb, *g.out_shape[2:-1], blocks, cb, width)
    order = ["n", "cb", *outer, "wb", "rc", *(r.name for r in rk), "ci", "wi"]
    tiles = te.compute(shape, element, name=name, axis_names=["n", "cb", *outer, "wb", "ci", "wi"],
                       loop_order=order, register_tile=True)

    def untile(n: E.Var, c: E.Var, *pos: E.Var) -> E.PrimExpr:
        last = pos[-1]
        return tiles[(n, E.floordiv(c, cb), *pos[:-1], E.floordiv(last, width), E.floormod(c, cb),
                      E.floormod(last, width))]

    return te.compute(g.out_shape, untile, name=f"{name}_out", axis_names=["n", "c", *(f"o{k}" for k in range(d))])


def planar_conv(data: te.Tensor, begins: Sequence[int], ends: Sequence[int], weight: WeightReader,
                g: ConvGeometry, name: str) -> te.Tensor:
    """A 2-d convolution of `data` (padded by `begins`/`ends`) in NCHW: `planar_tiles`, copied out."""
    read = planar_tiles(data, begins, ends, weight, g, name)
    return te.compute(g.out_shape, read, name=f"{name}_out", axis_names=["n", "c", "o0", "o1"])


# (n, c, y, x) -> output element (c, y, x) of image n in a `planar_tiles` result
PlanarReader = Callable[[E.PrimExpr, E.PrimExpr, E.PrimExpr, E.PrimExpr], E.PrimExpr]


@dataclass(frozen=True)
class ImageTaps:
    """A kernel dim across images, for `planar_tiles`: output image n sums over taps t < `taps` the
    2-d convolution of input image `image(n, t)`, weight taps (t, kh, kw). A 3-d convolution with
    its depth slices as the images (`conv_slices`), so each slice is copied into planes once."""

    taps: int
    image: Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]


def planar_tiles(data: te.Tensor, begins: Sequence[int], ends: Sequence[int], weight: WeightReader,
                 g: ConvGeometry, name: str, planes_name: str = "planes",
                 image_taps: ImageTaps | None = None) -> PlanarReader:
    """A 2-d convolution of `data` (padded by `begins`/`ends`) as register tiles over flattened planes.

    The input is regrouped once, padding included, into `planes[n, c, ph, pw,
    r, x]`: for each stride phase (ph, pw), the padded rows r*sh + ph and
    columns x*sw + pw, stored row after row with a pitch of W' columns. A
    kernel tap then reads, for the output position p = oh * W' + ow, the plane
    element at flat offset p + (row offset) * W' + (column offset): one
    contiguous run per tap whatever the image width, so a register tile spans
    TW consecutive positions across rows. Positions with ow >= OW (W' - OW per
    row) are computed and dropped; a 7 x 7 layer wastes 2 of 9 columns,
    where tiles along one row of 7 would waste 9 of 16.

    Tiles t[n, cb, ci, pb, pi] hold output channel cb*CB + ci at position
    pb*TW + pi, so one channel's positions are contiguous and the final copy
    (where bias and activation epilogues run) reads rows of OW values.

    With `image_taps` the output images read other images of `data` (see `ImageTaps`).
    """
    oc = g.out_shape[1]
    oh, ow = g.out_shape[2:]
    n_, c_in, h_in, w_in = data.shape  # planes per input image
    sh, sw = g.strides
    dh, dw = g.dilation
    top, left = begins
    cb, width = g.tile_channels(), g.tile_width
    pitch = -(-(w_in + left + ends[1]) // sw)  # W'
    blocks = -(-(oh * pitch) // width)
    row_reach = (g.kernel[0] - 1) * dh // sh
    col_reach = (g.kernel[1] - 1) * dw // sw
    rows = -(-(blocks * width + row_reach * pitch + col_reach) // pitch)

    def plane(n: E.Var, c: E.Var, ph: E.Var, pw: E.Var, r: E.Var, x: E.Var) -> E.PrimExpr:
        h = E.sub(E.add(E.mul(r, sh), ph), top)
        w = E.sub(E.add(E.mul(x, sw), pw), left)
        inside = E.logical_and(E.logical_and(E.ge(h, 0), E.lt(h, h_in)), E.logical_and(E.ge(w, 0), E.lt(w, w_in)))
        # the read happens only inside the image: straight indices, which gcc vectorises as masked loads
        return E.select(inside, data[(n, c, h, w)], E.const(0, data.dtype), guarded=True)

    # only the stride phases some tap reads: a 1x1 convolution of stride 2 copies a quarter of its input
    phases = tuple(s if any(k * d % s for k in range(kernel)) else 1
                   for s, d, kernel in zip(g.strides, g.dilation, g.kernel))
    shape = (n_, c_in, *phases, rows, pitch)
    if pitch >= SPLIT_ROWS_PITCH and isinstance(data.op, te.PlaceholderOp):
        # wide rows of a kernel input: loops bounded by the padding, which gcc vectorises (see conv_planes)
        planes = plane_copy(data, shape, begins, g.strides, planes_name)
    else:
        # narrow rows keep the masked select, faster there than three short loops; a computed input
        # (a region's gathered taps) is inlined into it rather than materialised for a copy
        planes = te.compute(shape, plane, name=planes_name, axis_names=["n", "c", "ph", "pw", "r", "x"],
                            materialize=True, split_bounds=pitch >= SPLIT_ROWS_PITCH)
    rc, (rkh, rkw) = _reduce_axes(g)
    across = [te.reduce_axis(image_taps.taps, "rkd")] if image_taps else []

    def element(n: E.Var, cblock: E.Var, ci: E.Var, pb: E.Var, pi: E.Var) -> E.PrimExpr:
        c = E.add(E.mul(cblock, cb), ci)
        th, tw = E.mul(rkh.var, dh), E.mul(rkw.var, dw)
        q = E.add(E.add(E.mul(pb, width), pi), E.add(E.mul(E.floordiv(th, sh), pitch), E.floordiv(tw, sw)))
        channel = g.input_channel(E.mul(cblock, cb), rc.var)  # one group per tile
        # flat offset q within the (ph, pw) plane: the lowering indexes
        # buffers by flat offset, so an index past the last axis's extent
        # addresses the following rows
        phase = [E.floormod(t, s) if kept == s else 0 for t, s, kept in zip((th, tw), (sh, sw), phases)]
        image = image_taps.image(n, across[0].var) if image_taps else n
        a = planes[(image, channel, *phase, 0, q)]
        taps = [*(t.var for t in across), rkh.var, rkw.var]
        return te.sum(E.mul(a, weight(c, rc.var, taps)), [rc, *across, rkh, rkw])

    tiles = te.compute((g.out_shape[0], oc // cb, cb, blocks, width), element, name=name,
                       axis_names=["n", "cb", "ci", "pb", "pi"],
                       loop_order=["n", *(("pb", "cb") if g.positions_outer else ("cb", "pb")),
                                   "rc", *(t.name for t in across), "rk0", "rk1", "ci", "pi"],
                       register_tile=True, unroll=["rk1"])
    channel_stride = blocks * width

    def untile(n: E.PrimExpr, c: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr) -> E.PrimExpr:
        # element (n, c, y * W' + x) of the tiles in row-major order (flat offset, as above)
        return tiles[(n, 0, 0, 0, E.add(E.mul(c, channel_stride), E.add(E.mul(y, pitch), x)))]

    return untile
