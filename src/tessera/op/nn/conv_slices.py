"""Dilated 1-d and 3-d convolutions as 2-d ones, so the region split of `conv_regions` applies to them too.

The tiled schedule of 1-d and 3-d convolutions (`conv_schedule`) copies the whole input padded and
computes every tap of every output: with dilation 12 and padding 12 on a 16-long axis the input is
padded to 40 and most taps multiply zeros. Instead:

* a 1-d convolution is a 2-d one of height 1: `plan_regions` splits its outputs where the taps that
  reach the input change, and each region reads the input where it lies (no padding copied);
* a 3-d convolution runs on its depth slices as images. Tap k of output depth o reads input depth
  o*stride - pad + k*dilation, so the output depths split, as a 2-d dim does in `conv_regions`,
  into spans of constant tap range (`tap_spans`). A span is a 2-d convolution of the output depths
  as images, with the span's depth taps as a third kernel dim across images (`ImageTaps`): its
  window of depth slices is copied into planes once, and no depth tap reads padding. Where
  dilation leaves most of a window unread, each depth tap instead runs alone over the output
  depths where it reads the input (`tap_pieces`), a 2-d convolution of just the slices it reads
  with the kernel's k-th plane; these pieces overlap and are summed. The pieces' 2-d convolutions
  split into regions where `plan_regions` finds that pays (then always per tap: the regions take
  no taps across images), else run as one plane (`planar_tiles`).

One copy sums the spans or pieces into the NCW or NCDHW output; bias and activation epilogues run
there. Only dilated convolutions come here (undilated ones keep their schedule and their generated
C). A 1-d one is split where `plan_regions` finds it pays; a 3-d one always is: on an AVX-512 EPYC
(16 to 64 channels, one thread) the slices ran from 1.4x (dilation 2, stride 2 on 32^3) and 3.6x
(dilation 2 on 16^3) to about 900x (dilation 18 on 12^3) faster than the tiled schedule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ... import te
from ...tir import expr as E
from ..schedule_context import ScheduleContext
from .conv_regions import DimGeometry, RegionPlan, Span, plan_regions, region_reader, tap_pieces, tap_spans
from .conv_schedule import ConvGeometry, ImageTaps, PlanarReader, WeightReader, planar_tiles


def sliced_conv(data: te.Tensor, weight: WeightReader, g: ConvGeometry, begins: Sequence[int], ends: Sequence[int],
                sched: ScheduleContext, name: str) -> te.Tensor | None:
    """The 1-d or 3-d convolution `g` of `data` (padded by `begins`/`ends`) through 2-d convolutions, or
    None where it keeps the tiled schedule (undilated, or a 1-d one whose regions would not pay)."""
    if not any(d > 1 for d in g.dilation):
        return None
    if g.rank == 1:
        return _conv1d(data, weight, g, begins, ends, sched, name)
    if g.rank == 3:
        return _conv3d(data, weight, g, begins, ends, sched, name)
    return None


def _conv1d(data: te.Tensor, weight: WeightReader, g: ConvGeometry, begins: Sequence[int], ends: Sequence[int],
            sched: ScheduleContext, name: str) -> te.Tensor | None:
    n_, c_in, length = data.shape
    flat = replace(g, out_shape=(*g.out_shape[:2], 1, g.out_shape[2]), kernel=(1, *g.kernel),
                   strides=(1, *g.strides), dilation=(1, *g.dilation), in_spatial=(1, length))
    plan = plan_regions((1, length), flat, (0, begins[0]), (0, ends[0]))
    if plan is None:
        return None
    row = te.compute((n_, c_in, 1, length), lambda n, c, _, x: data[(n, c, x)], name=f"{name}_rows")

    def weight_2d(c: E.PrimExpr, rc: E.PrimExpr, taps: Sequence[E.PrimExpr]) -> E.PrimExpr:
        return weight(c, rc, [taps[1]])  # taps[0] is the height's single tap

    read = region_reader(row, plan, weight_2d, flat, sched, name)
    return te.compute(g.out_shape, lambda n, c, x: read(n, c, E.const(0, "int32"), x), name=f"{name}_out",
                      axis_names=["n", "c", "o0"])


@dataclass(frozen=True)
class DepthPlan:
    """How a 3-d convolution runs on its depth slices: `spans` of output depths, each with the depth taps
    [tap_start, tap_stop) it computes; `across` when each span takes its taps across images (spans of
    constant tap range, `tap_spans`), else each is one tap (`tap_pieces`, overlapping, summed). `slab`:
    the regions of every span's 2-d convolution (None: one plane)."""

    depth: DimGeometry
    spans: tuple[Span, ...]
    across: bool
    slab: RegionPlan | None

    @property
    def step(self) -> int:
        """Every how many input depths a span's taps read one, across images (the depth stride and dilation
        both move by multiples of it)."""
        return math.gcd(self.depth.stride, self.depth.dilation) if self.across else self.depth.stride

    def slices(self, span: Span) -> int:
        """The depth slices copied into planes for `span`: its window (the depths of one phase of it), or
        one per output depth."""
        return (self.depth.window(span) - 1) // self.step + 1 if self.across else span.size

    def slices_copied(self) -> int:
        """Depth slices copied into planes, per image."""
        return sum(self.slices(s) for s in self.spans if s.taps)


def plan_depth(in_spatial: Sequence[int], g: ConvGeometry, begins: Sequence[int], ends: Sequence[int]) -> DepthPlan:
    """The depth plan that copies fewer slices (spans across images on a tie; per tap where the 2-d
    slices split into regions)."""
    depth = DimGeometry(in_spatial[0], g.out_shape[2], g.kernel[0], g.strides[0], g.dilation[0], begins[0])
    slab = plan_regions(in_spatial[1:], _flat(g, 1, in_spatial), begins[1:], ends[1:])
    per_tap = DepthPlan(depth, tap_pieces(depth), False, slab)
    across = DepthPlan(depth, tap_spans(depth), True, slab)
    return across if slab is None and across.slices_copied() <= per_tap.slices_copied() else per_tap


def _flat(g: ConvGeometry, images: int, in_spatial: Sequence[int]) -> ConvGeometry:
    """The 2-d convolution of one depth slice, `images` output depths as images."""
    return replace(g, out_shape=(g.out_shape[0] * images, g.out_shape[1], *g.out_shape[3:]), kernel=g.kernel[1:],
                   strides=g.strides[1:], dilation=g.dilation[1:], in_spatial=tuple(in_spatial[1:]))


def _conv3d(data: te.Tensor, weight: WeightReader, g: ConvGeometry, begins: Sequence[int], ends: Sequence[int],
            sched: ScheduleContext, name: str) -> te.Tensor:
    n_, c_in = data.shape[:2]
    in_spatial = tuple(data.shape[2:])
    plan = plan_depth(in_spatial, g, begins, ends)
    stride, dilation = g.strides[0], g.dilation[0]
    readers: list[tuple[Span, PlanarReader]] = []
    for index, span in enumerate(s for s in plan.spans if s.taps):
        first = plan.depth.first_input(span)  # the input depth output depth span.start's first tap reads
        # the slices as images: the span's window when its taps run across images, else one per output depth
        per_image, step = plan.slices(span), plan.step

        def slices(b: E.Var, c: E.Var, h: E.Var, w: E.Var, per_image: int = per_image, step: int = step,
                   first: int = first) -> E.PrimExpr:
            image, depth = (E.floordiv(b, per_image), E.floormod(b, per_image)) if n_ > 1 else (0, b)
            return data[(image, c, E.add(E.mul(depth, step), first), h, w)]

        view = te.compute((n_ * per_image, c_in, *in_spatial[1:]), slices, name=f"{name}_d{index}_slices")
        flat = _flat(g, span.size, in_spatial)
        piece_name, prefix = f"{name}_d{index}", f"d{index}_"
        if plan.across:
            def plane_weight(c: E.PrimExpr, rc: E.PrimExpr, taps: Sequence[E.PrimExpr],
                             tap: int = span.tap_start) -> E.PrimExpr:
                return weight(c, rc, [E.add(taps[0], tap) if tap else taps[0], *taps[1:]])

            def image_of(n: E.PrimExpr, t: E.PrimExpr, span: Span = span, per_image: int = per_image) -> E.PrimExpr:
                # output depth span.start + o of image i reads window depth o*stride + t*dilation (steps apart)
                o, i = (E.floormod(n, span.size), E.floordiv(n, span.size)) if n_ > 1 else (n, 0)
                return E.add(E.mul(i, per_image), E.add(E.mul(o, stride // step), E.mul(t, dilation // step)))

            read = planar_tiles(view, begins[1:], ends[1:], plane_weight, flat.scheduled(sched), piece_name,
                                planes_name=f"{prefix}planes", image_taps=ImageTaps(span.taps, image_of))
        else:
            def tap_weight(c: E.PrimExpr, rc: E.PrimExpr, taps: Sequence[E.PrimExpr],
                           tap: int = span.tap_start) -> E.PrimExpr:
                return weight(c, rc, [E.const(tap, "int32"), *taps])

            if plan.slab is not None:
                read = region_reader(view, plan.slab, tap_weight, flat, sched, piece_name, prefix)
            else:
                read = planar_tiles(view, begins[1:], ends[1:], tap_weight, flat.scheduled(sched), piece_name,
                                    planes_name=f"{prefix}planes")
        readers.append((span, read))

    def element(n: E.Var, c: E.Var, d: E.Var, y: E.Var, x: E.Var) -> E.PrimExpr:
        values = []
        for span, read in readers:
            image = E.sub(d, span.start) if n_ == 1 else E.add(E.mul(n, span.size), E.sub(d, span.start))
            inside = E.logical_and(E.ge(d, span.start), E.lt(d, span.stop))
            values.append(E.select(inside, read(image, c, y, x), E.const(0, data.dtype), guarded=True))
        total = values[0] if values else E.const(0, data.dtype)  # none: every depth tap reads padding
        for value in values[1:]:
            total = E.add(total, value)
        return total

    return te.compute(g.out_shape, element, name=f"{name}_out", axis_names=["n", "c", "o0", "o1", "o2"])
