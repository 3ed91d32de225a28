"""Dilated 2-d convolutions split into output regions by the kernel taps that reach the image.

Tap k of output o (along one spatial dim) reads input o*stride - pad + k*dilation. With a large
dilation most taps of most outputs land in the zero padding: a 3x3 convolution of dilation 36 on a
14x14 map (DeepLabV3's ASPP head) pads the input to 86x86, builds 86-wide planes, and computes 9
taps for each of 14 x 86 positions, where only the centre tap of 14 x 14 positions ever reads the
image. Along each dim the taps that reach the image form a contiguous range that changes at a few
outputs only, so the outputs split into spans of constant tap range (`tap_spans`). Each product of
a row span and a column span is a region: a convolution with a smaller kernel (only its taps) whose
every tap reads the image for every output it computes, so it needs no padding. Alternatively
(`tap_pieces`, a per-tap plan) each tap alone covers the outputs where it reads the image; these
pieces overlap and are summed, and no position computes a tap that reads padding.

A region (or piece) runs through `planar_tiles`, on its receptive window, or, where the dilation
leaves most of that window unread, on a gathered image with one channel per (input channel, tap):
the region's im2col, no larger than the window and with rows exactly as wide as the region's output.
One copy stitches the regions into the output (a chain of selects, or the sum of the covering pieces;
bias and activation epilogues run there).

Splitting costs a kernel stage and a little tile rounding per region, so a dim may instead stay one
span (its taps trimmed to those that reach the image somewhere, the rest of its padding still read
as zeros). `plan_regions` estimates the work of each plan and keeps the one-plane schedule unless
a plan saves at least a third of it: undilated convolutions keep theirs (and their generated C).

With a constant weight, two graph passes come first (`transform/trim_conv_taps.py`,
`transform/split_dilated_conv.py`): taps that never reach the image leave the kernel (ASPP's
dilations 24 and 36 become 1x1s), and a convolution whose taps reach the image for at most a third
of its tap-positions becomes pointwise pieces with contiguous per-tap weights (each region here
reads its taps out of the OIHW weight with a stride of kh*kw, so nine pieces stream a 256-channel
weight nine times). The regions serve the rest: weights computed at run time, and denser reach.

Why regions, not space-to-batch: space-to-batch turns dilation d into a batch of d*d undilated
convolutions of maps d*d times smaller, but keeps the padding. With d = 36 on 14x14 each "image"
is one pixel padded to 3x3, still computing 9 taps where one reaches the image. Regions drop taps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ... import te
from ...tir import expr as E
from ..schedule_context import ScheduleContext
from .conv_schedule import WIDTH_CANDIDATES, ConvGeometry, PlanarReader, WeightReader, planar_tiles

# what one element copied, stored or stitched (scalar, guarded) costs, in vectorised multiply-adds;
# fitted to 3x3 convolutions of 64 and 256 channels (14x14 to 65x65, dilation 4 to 36) on an AVX-512 EPYC
ELEMENT_COST = 64
# a gathered region of several taps finds each weight by dividing its reduction index (per multiply-add
# group, in the inner loop): about this many times slower than a one-tap piece, measured the same way
GATHERED_TAPS_COST = 3
# split only when the estimate drops below this fraction of the one-plane schedule's
WORTH_SPLITTING = 2 / 3


@dataclass(frozen=True)
class Span:
    """Outputs [start, stop) along one dim whose taps [tap_start, tap_stop) read the image (for every
    output, when the span comes from `tap_spans`)."""

    start: int
    stop: int
    tap_start: int
    tap_stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def taps(self) -> int:
        return self.tap_stop - self.tap_start


@dataclass(frozen=True)
class DimGeometry:
    """One spatial dim of a convolution."""

    size: int  # input
    out: int
    kernel: int
    stride: int
    dilation: int
    pad: int  # before the input

    def reach(self, o: int) -> tuple[int, int]:
        """The taps [lo, hi) of output `o` that read the input, (0, 0) if none does."""
        inside = [k for k in range(self.kernel) if 0 <= o * self.stride - self.pad + k * self.dilation < self.size]
        return (inside[0], inside[-1] + 1) if inside else (0, 0)

    def first_input(self, span: Span) -> int:
        """The input index that output `span.start`'s first tap reads (negative: in the padding)."""
        return span.start * self.stride - self.pad + span.tap_start * self.dilation

    def window(self, span: Span) -> int:
        """Input positions from the first to the last that `span` reads."""
        return (span.size - 1) * self.stride + (span.taps - 1) * self.dilation + 1

    def pitch(self, span: Span) -> int:
        """The width of one stride phase of the span's window: the positions `planar_tiles` computes per row."""
        return -(-self.window(span) // self.stride)


def tap_spans(dim: DimGeometry) -> tuple[Span, ...]:
    """The outputs along `dim` split where the range of taps reading the image changes."""
    spans: list[Span] = []
    for o in range(dim.out):
        lo, hi = dim.reach(o)
        if spans and (spans[-1].tap_start, spans[-1].tap_stop) == (lo, hi):
            spans[-1] = replace(spans[-1], stop=o + 1)
        else:
            spans.append(Span(o, o + 1, lo, hi))
    return tuple(spans)


def merged(spans: Sequence[Span]) -> Span:
    """One span over all of `spans`, with every tap any of them reads."""
    reading = [s for s in spans if s.taps]
    if not reading:
        return Span(spans[0].start, spans[-1].stop, 0, 0)
    return Span(spans[0].start, spans[-1].stop, min(s.tap_start for s in reading), max(s.tap_stop for s in reading))


def tap_pieces(dim: DimGeometry) -> tuple[Span, ...]:
    """For each tap that reads the image somewhere, the outputs along `dim` where it does (a span of
    that one tap)."""
    pieces = []
    for k in range(dim.kernel):
        reading = [o for o in range(dim.out) if 0 <= o * dim.stride - dim.pad + k * dim.dilation < dim.size]
        if reading:
            pieces.append(Span(reading[0], reading[-1] + 1, k, k + 1))
    return tuple(pieces)


@dataclass(frozen=True)
class RegionPlan:
    """The output as a sum of pieces: each a rectangle (row span x column span) computed with the
    spans' taps. Either the pieces tile the output (`rows` x `cols`, products of spans), or, `per_tap`,
    each is one tap over the outputs where it reads the image, and the pieces overlap (summed)."""

    dims: tuple[DimGeometry, DimGeometry]
    channels: tuple[int, int, int]  # input channels, input channels per group, output channels
    rows: tuple[Span, ...]
    cols: tuple[Span, ...]
    per_tap: bool = False

    def regions(self) -> list[tuple[Span, Span]]:
        return list(itertools.product(self.rows, self.cols))

    def work(self) -> int:
        """Estimated cost in multiply-adds: those of each region (positions rounded up to whole tiles),
        plus `ELEMENT_COST` for each element its input copy and its tiles hold, and each the stitch reads."""
        h, w = self.dims
        c_in, per_group, c_out = self.channels
        tile = min(WIDTH_CANDIDATES)
        macs = elements = computing = 0
        for r, c in self.regions():
            if not (r.taps and c.taps):
                continue
            taps = r.taps * c.taps
            if self.gathers(r, c):
                positions, copied = r.size * c.size, taps * r.size * c.size
            else:
                positions, copied = r.size * w.pitch(c), h.window(r) * w.window(c)
            positions = -(-positions // tile) * tile
            slowdown = GATHERED_TAPS_COST if taps > 1 and self.gathers(r, c) else 1
            macs += positions * taps * per_group * c_out * slowdown
            elements += c_in * copied + c_out * positions
            computing += 1
        stitched = (computing if self.per_tap else 1) * c_out * h.out * w.out  # a sum reads every piece
        return macs + ELEMENT_COST * (elements + stitched)

    def gathers(self, r: Span, c: Span) -> bool:
        """Whether region (r, c) copies each tap's inputs apart (one plane per tap, an image as small as
        the region's output) rather than its receptive window: when that is no larger, as where a
        dilation wider than the region leaves most of the window unread."""
        h, w = self.dims
        return r.taps * c.taps * r.size * c.size <= h.window(r) * w.window(c)


def one_plane_work(dims: tuple[DimGeometry, DimGeometry], channels: tuple[int, int, int], pad_after: int) -> int:
    """The estimate of `RegionPlan.work` for the schedule without regions: every tap of every row,
    each row as wide as a stride phase of the padded input (`pad_after`: its padding after the last column)."""
    h, w = dims
    c_in, per_group, c_out = channels
    pitch = -(-(w.size + w.pad + pad_after) // w.stride)
    tile = min(WIDTH_CANDIDATES)
    positions = -(-(h.out * pitch) // tile) * tile
    copied = (positions // pitch + (h.kernel - 1) * h.dilation // h.stride + 1) * pitch * w.stride * h.stride
    macs = positions * h.kernel * w.kernel * per_group * c_out
    return macs + ELEMENT_COST * (c_in * copied + c_out * positions + c_out * h.out * w.out)


def plan_regions(in_spatial: Sequence[int], g: ConvGeometry, begins: Sequence[int],
                 ends: Sequence[int], sched: ScheduleContext | None = None) -> RegionPlan | None:
    """The cheapest split of a 2-d convolution's output into regions, or None when the one-plane
    schedule is about as cheap (see the module doc). With `sched`, a dilated convolution's plan is
    a tuning knob (`choose_plan`) whose default is that estimate."""
    dims = (DimGeometry(in_spatial[0], g.out_shape[2], g.kernel[0], g.strides[0], g.dilation[0], begins[0]),
            DimGeometry(in_spatial[1], g.out_shape[3], g.kernel[1], g.strides[1], g.dilation[1], begins[1]))
    channels = (g.in_channels_per_group * g.out_shape[1] // g.out_channels_per_group, g.in_channels_per_group,
                g.out_shape[1])
    choices = [(tap_spans(d), (merged(tap_spans(d)),)) for d in dims]
    plans = [RegionPlan(dims, channels, rows, cols) for rows in choices[0] for cols in choices[1]]
    # every tap on its own: no position computes a tap that reads padding (many small pieces, summed)
    plans.append(RegionPlan(dims, channels, tap_pieces(dims[0]), tap_pieces(dims[1]), per_tap=True))
    best = min(plans, key=RegionPlan.work)
    estimated = best if best.work() <= WORTH_SPLITTING * one_plane_work(dims, channels, ends[1]) else None
    if sched is None or (estimated is None and all(d == 1 for d in g.dilation)):
        return estimated  # undilated convolutions keep the one-plane schedule: no knob
    return choose_plan(sched, g, begins, ends, [None, *plans], estimated)


def choose_plan(sched: ScheduleContext, g: ConvGeometry, begins: Sequence[int], ends: Sequence[int],
                plans: Sequence[RegionPlan | None], default: RegionPlan | None) -> RegionPlan | None:
    """The knob `conv2d_regions`: which of `plans` (None: the one-plane schedule) runs, {"plan": index}
    of the first of equal plans; the cost model's estimate (`default`) unless the tuner measured better.
    (ELEMENT_COST and the other constants were fitted on one machine; measuring the plans overrides them.)"""
    distinct = [k for k, plan in enumerate(plans) if plan not in plans[:k]]
    candidates = [{"plan": k} for k in distinct]
    description = {"in": list(g.in_spatial), "out": list(g.out_shape), "kernel": list(g.kernel),
                   "strides": list(g.strides), "dilation": list(g.dilation), "pads": [*begins, *ends],
                   "in_per_group": g.in_channels_per_group, "out_per_group": g.out_channels_per_group}
    picked = sched.choose("conv2d_regions", description, candidates, {"plan": plans.index(default)},
                          work=g.multiply_adds)
    return plans[picked["plan"]]


def region_conv(data: te.Tensor, plan: RegionPlan, weight: WeightReader, g: ConvGeometry, sched: ScheduleContext,
                name: str) -> te.Tensor:
    """The convolution as `plan`'s regions, each through `planar_tiles`, stitched into NCHW by one copy.

    `g` is the whole convolution's geometry, its tile not chosen: each region chooses its own.
    """
    read = region_reader(data, plan, weight, g, sched, name)
    return te.compute(g.out_shape, read, name=f"{name}_out", axis_names=["n", "c", "o0", "o1"])


def region_reader(data: te.Tensor, plan: RegionPlan, weight: WeightReader, g: ConvGeometry, sched: ScheduleContext,
                  name: str, prefix: str = "") -> PlanarReader:
    """Output element (n, c, y, x) of `region_conv`, for a caller that stitches it into its own copy
    (`conv_slices`: a 1-d or 3-d convolution); `prefix` starts the names of its buffers."""
    h, w = plan.dims
    readers: dict[tuple[Span, Span], PlanarReader] = {}
    for index, (r, c) in enumerate(plan.regions()):
        if not (r.taps and c.taps):
            continue  # every tap of these outputs reads padding: they are zero
        region = replace(g, out_shape=(*g.out_shape[:2], r.size, c.size), kernel=(r.taps, c.taps),
                         in_spatial=(h.window(r), w.window(c)))
        shifted = _shifted(weight, (r.tap_start, c.tap_start))
        if plan.gathers(r, c):
            readers[(r, c)] = _gathered(data, plan, r, c, shifted, region, sched, name, index, prefix)
            continue
        # input row = first + r'*stride + k'*dilation for region output r' and region tap k'
        begins = (-h.first_input(r), -w.first_input(c))
        ends = tuple(win - size - b for win, size, b in
                     zip((h.window(r), w.window(c)), data.shape[2:], begins))
        readers[(r, c)] = planar_tiles(data, begins, ends, shifted, region.scheduled(sched), f"{name}_r{index}",
                                       planes_name=f"{prefix}planes_r{index}")

    def element(n: E.PrimExpr, ch: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr) -> E.PrimExpr:
        if plan.per_tap:
            return _summed(n, ch, y, x, plan, readers, data.dtype)

        def along_cols(r: Span) -> E.PrimExpr:
            def leaf(c: Span) -> E.PrimExpr:
                read = readers.get((r, c))
                if read is None:
                    return E.const(0, data.dtype)
                return read(n, ch, _minus(y, r.start), _minus(x, c.start))

            return _chain(x, plan.cols, leaf)

        return _chain(y, plan.rows, along_cols)

    return element


def _summed(n: E.PrimExpr, ch: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr, plan: RegionPlan,
            readers: dict[tuple[Span, Span], PlanarReader], dtype: str) -> E.PrimExpr:
    """The sum of the pieces that cover (y, x), each read only where it does (a guarded select)."""
    values = []
    for (r, c), read in readers.items():
        inside = E.logical_and(E.logical_and(E.ge(y, r.start), E.lt(y, r.stop)),
                               E.logical_and(E.ge(x, c.start), E.lt(x, c.stop)))
        values.append(E.select(inside, read(n, ch, _minus(y, r.start), _minus(x, c.start)), E.const(0, dtype),
                               guarded=True))
    if not values:
        return E.const(0, dtype)  # every tap of every output reads padding
    total = values[0]
    for value in values[1:]:
        total = E.add(total, value)
    return total


def _gathered(data: te.Tensor, plan: RegionPlan, r: Span, c: Span, weight: WeightReader, region: ConvGeometry,
              sched: ScheduleContext, name: str, index: int, prefix: str) -> PlanarReader:
    """Region (r, c) as a 1x1 convolution of an image with a channel per (input channel, tap): each
    tap's inputs for the region's outputs, side by side (im2col of the region; see `RegionPlan.gathers`)."""
    h, w = plan.dims
    taps = r.taps * c.taps
    n_, c_in, h_in, w_in = data.shape

    def element(n: E.Var, v: E.Var, y: E.Var, x: E.Var) -> E.PrimExpr:
        channel, tap = E.floordiv(v, taps), E.floormod(v, taps)
        row = E.add(E.add(h.first_input(r), E.mul(E.floordiv(tap, c.taps), h.dilation)), E.mul(y, h.stride))
        col = E.add(E.add(w.first_input(c), E.mul(E.floormod(tap, c.taps), w.dilation)), E.mul(x, w.stride))
        inside = E.logical_and(E.logical_and(E.ge(row, 0), E.lt(row, h_in)),
                               E.logical_and(E.ge(col, 0), E.lt(col, w_in)))
        return E.select(inside, data[(n, channel, row, col)], E.const(0, data.dtype), guarded=True)

    gathered = te.compute((n_, c_in * taps, r.size, c.size), element, name=f"{prefix}taps_r{index}")

    def read_weight(ch: E.PrimExpr, rc: E.PrimExpr, _: Sequence[E.PrimExpr]) -> E.PrimExpr:
        tap = E.floormod(rc, taps)
        return weight(ch, E.floordiv(rc, taps), [E.floordiv(tap, c.taps), E.floormod(tap, c.taps)])

    one_by_one = replace(region, kernel=(1, 1), strides=(1, 1), dilation=(1, 1), in_spatial=(r.size, c.size),
                         in_channels_per_group=region.in_channels_per_group * taps)
    return planar_tiles(gathered, (0, 0), (0, 0), read_weight, one_by_one.scheduled(sched), f"{name}_r{index}",
                        planes_name=f"{prefix}planes_r{index}")


def _chain(index: E.PrimExpr, spans: Sequence[Span], value: Callable[[Span], E.PrimExpr]) -> E.PrimExpr:
    """value(span) for the span holding `index`: a chain of guarded selects (only the chosen region is read)."""
    result = value(spans[-1])
    for span in reversed(spans[:-1]):
        result = E.select(E.lt(index, span.stop), value(span), result, guarded=True)
    return result


def _minus(index: E.PrimExpr, offset: int) -> E.PrimExpr:
    return E.sub(index, offset) if offset else index


def _shifted(weight: WeightReader, first_taps: tuple[int, ...]) -> WeightReader:
    """`weight` read from tap `first_taps` on."""
    if not any(first_taps):
        return weight

    def read(c: E.PrimExpr, rc: E.PrimExpr, taps: Sequence[E.PrimExpr]) -> E.PrimExpr:
        return weight(c, rc, [E.add(t, k) if k else t for t, k in zip(taps, first_taps)])

    return read


