"""Dilated 1-d and 3-d convolutions as 2-d ones, so the region split of `conv_regions` applies to them too.

The tiled schedule of 1-d and 3-d convolutions (`conv_schedule`) copies the whole input padded and
computes every tap of every output: with dilation 12 and padding 12 on a 16-long axis the input is
padded to 40 and most taps multiply zeros. Instead:

* a 1-d convolution is a 2-d one of height 1: `plan_regions` splits its outputs where the taps that
  reach the input change, and each region reads the input where it lies (no padding copied);
* a 3-d convolution is a sum over its depth taps (`tap_pieces` along depth). Tap k of output depth
  o reads input depth o*stride - pad + k*dilation, so over the output depths where that slice exists
  the tap is a 2-d convolution of the slices (those output depths batched as images) with the
  kernel's k-th plane; output depths where the tap reads padding compute nothing for it. Each such
  2-d convolution runs split into regions (`plan_regions`) or as one plane (`planar_tiles`).

One copy sums the pieces into the NCW or NCDHW output; bias and activation epilogues run there.
Only dilated convolutions come here (undilated ones keep their schedule and their generated C). A
1-d one is split where `plan_regions` finds it pays; a 3-d one always is: on an AVX-512 EPYC the
slices ran 3x (dilation 2, strided or not) to several hundred times (dilation 18 on 12^3) faster
than the tiled schedule, though each depth slice is copied once per depth tap that reads it (at
most the kernel's depth times the input, where the tiled schedule copies the padded volume once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ... import te
from ...tir import expr as E
from ..schedule_context import ScheduleContext
from .conv_regions import DimGeometry, RegionPlan, Span, plan_regions, region_reader, tap_pieces
from .conv_schedule import ConvGeometry, PlanarReader, WeightReader, planar_tiles


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
class DepthPiece:
    """Depth tap `span.tap_start` over output depths `span.start`..`span.stop`, as a 2-d convolution
    of the depth slices it reads: `flat` its geometry (one image per output depth), `plan` its regions
    (None: one plane)."""

    span: Span
    flat: ConvGeometry
    plan: RegionPlan | None


def depth_pieces(in_spatial: Sequence[int], g: ConvGeometry, begins: Sequence[int],
                 ends: Sequence[int]) -> tuple[DepthPiece, ...]:
    """For each depth tap that reads the input somewhere, its piece (see `DepthPiece`)."""
    depth = DimGeometry(in_spatial[0], g.out_shape[2], g.kernel[0], g.strides[0], g.dilation[0], begins[0])
    pieces = []
    for span in tap_pieces(depth):
        flat = replace(g, out_shape=(g.out_shape[0] * span.size, g.out_shape[1], *g.out_shape[3:]),
                       kernel=g.kernel[1:], strides=g.strides[1:], dilation=g.dilation[1:],
                       in_spatial=tuple(in_spatial[1:]))
        pieces.append(DepthPiece(span, flat, plan_regions(in_spatial[1:], flat, begins[1:], ends[1:])))
    return tuple(pieces)


def _conv3d(data: te.Tensor, weight: WeightReader, g: ConvGeometry, begins: Sequence[int], ends: Sequence[int],
            sched: ScheduleContext, name: str) -> te.Tensor:
    n_, c_in = data.shape[:2]
    in_spatial = tuple(data.shape[2:])
    pieces = depth_pieces(in_spatial, g, begins, ends)
    stride, dilation, pad = g.strides[0], g.dilation[0], begins[0]
    readers: list[tuple[Span, PlanarReader]] = []
    for index, piece in enumerate(pieces):
        span, tap = piece.span, piece.span.tap_start
        first = span.start * stride - pad + tap * dilation  # the input depth output depth span.start reads

        def slices(b: E.Var, c: E.Var, h: E.Var, w: E.Var, span: Span = span, first: int = first) -> E.PrimExpr:
            image, depth = (E.floordiv(b, span.size), E.floormod(b, span.size)) if n_ > 1 else (0, b)
            return data[(image, c, E.add(E.mul(depth, stride), first), h, w)]

        view = te.compute((n_ * span.size, c_in, *in_spatial[1:]), slices, name=f"{name}_d{index}_slices")

        def plane_weight(c: E.PrimExpr, rc: E.PrimExpr, taps: Sequence[E.PrimExpr], tap: int = tap) -> E.PrimExpr:
            return weight(c, rc, [E.const(tap, "int32"), *taps])

        piece_name, prefix = f"{name}_d{index}", f"d{index}_"
        if piece.plan is not None:
            read = region_reader(view, piece.plan, plane_weight, piece.flat, sched, piece_name, prefix)
        else:
            read = planar_tiles(view, begins[1:], ends[1:], plane_weight, piece.flat.scheduled(sched), piece_name,
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
