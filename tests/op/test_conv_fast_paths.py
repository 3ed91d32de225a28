"""Pointwise convolutions as GEMM microkernel calls (`conv_gemm`) and wide one-channel (depthwise) tiles.

The generated C is checked for the AVX2 and AVX-512 levels (`c -mcpu=x86-64-v3/v4`) on any x86-64 host;
the numbers are compared with NumPy's reference where this CPU runs the level."""

from __future__ import annotations

import platform

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op.nn import conv
from tessera.op.nn.conv import ConvAttrs, conv_reference
from tessera.op.nn.conv_depthwise import DEPTHWISE_SYMBOL
from tessera.op.nn.conv_gemm import choose_pointwise_kernel, is_pointwise
from tessera.op.nn.conv_planes import inside
from tessera.op.nn.conv_schedule import SINGLE_CHANNEL_WIDTHS, ConvGeometry
from tessera.op.schedule_context import ScheduleContext
from tessera.target import Target
from tessera.target.simd import float32_lanes
from tessera.testing.isa import require_level

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 ISA levels need an x86-64 host")
LEVELS = ["x86-64-v3", "x86-64-v4"]  # AVX2 + FMA, AVX-512


def _conv(x_shape, w_shape, strides=(1, 1), padding=(0, 0, 0, 0), groups=1):
    x = relay.Var("x", relay.TensorType(x_shape, "float32"))
    w = relay.Var("w", relay.TensorType(w_shape, "float32"))
    y = conv.conv2d(x, w, strides=strides, padding=padding, dilation=(1, 1), groups=groups)
    return relay.IRModule.from_expr(relay.Function((x, w), y))


def _build(x_shape, w_shape, level, **attrs):
    return tessera.build(_conv(x_shape, w_shape, **attrs), target=f"c -mcpu={level}")


def _check(x_shape, w_shape, level, **attrs):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    lib = _build(x_shape, w_shape, level, **attrs)
    source = "".join(lib.c_sources.values())
    require_level(level)
    got = lib(x, w)[0]
    want = conv_reference([x, w], ConvAttrs(attrs.get("strides", (1, 1)), attrs.get("padding", (0,) * 4), (1, 1),
                                            attrs.get("groups", 1)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return source


POINTWISE = [  # (input shape, weight shape, groups): odd sizes, ragged row and column panels, groups, batch
    ((1, 16, 56, 56), (96, 16, 1, 1), 1),
    ((1, 96, 13, 11), (16, 96, 1, 1), 1),
    ((2, 24, 12, 11), (40, 24, 1, 1), 1),
    ((1, 3, 15, 9), (9, 3, 1, 1), 1),
    ((1, 24, 12, 12), (48, 8, 1, 1), 3),  # ShuffleNet's grouped pointwise
    ((2, 20, 16, 9), (30, 10, 1, 1), 2),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("x_shape, w_shape, groups", POINTWISE)
def test_pointwise_convolutions_call_the_gemm_and_match_numpy(level, x_shape, w_shape, groups):
    source = _check(x_shape, w_shape, level, groups=groups)
    assert "ts_sgemm_" in source and "planes_buf" not in source


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("strides, padding, w_shape", [
    ((2, 2), (0, 0, 0, 0), (32, 16, 1, 1)),  # strided: the positions are not one matrix column
    ((1, 1), (1, 1, 1, 1), (32, 16, 1, 1)),  # padded
    ((1, 1), (0, 0, 0, 0), (4, 16, 1, 1)),  # fewer output channels than a microkernel panel is worth
    ((1, 1), (0, 0, 0, 0), (32, 16, 1, 1)),  # 99 positions: too few to amortise packing the weights
])
def test_other_one_by_one_convolutions_keep_the_planar_schedule(level, strides, padding, w_shape):
    source = _check((1, 16, 9, 11), w_shape, level, strides=strides, padding=padding)
    assert "ts_sgemm_" not in source and "_tile[" in source


@pytest.mark.parametrize("rows, want_mr", [(16, 8), (96, 12), (24, 12), (8, 8)])
def test_the_row_panel_wastes_fewest_rows(rows, want_mr):
    g = ConvGeometry((1, rows, 16, 16), (1, 1), (1, 1), (1, 1), 16, rows)
    kernel = choose_pointwise_kernel(ScheduleContext(Target("c -mcpu=x86-64-v4")), g)
    assert kernel is not None and kernel.mr == want_mr and kernel.nr == 32


def test_no_microkernel_for_small_maps_or_without_avx2():
    small = ConvGeometry((1, 32, 11, 11), (1, 1), (1, 1), (1, 1), 16, 32)
    assert choose_pointwise_kernel(ScheduleContext(Target("c -mcpu=x86-64-v4")), small) is None
    g = ConvGeometry((1, 32, 16, 16), (1, 1), (1, 1), (1, 1), 16, 32)
    assert is_pointwise(g, (0, 0, 0, 0)) and not is_pointwise(g, (0, 1, 0, 0))
    assert choose_pointwise_kernel(ScheduleContext(Target("c -mcpu=x86-64-v2")), g) is None
    assert choose_pointwise_kernel(ScheduleContext(Target("c -mcpu=cortex-m7")), g) is None


DEPTHWISE = [  # (input shape, strides, padding)
    ((1, 96, 56, 56), (1, 1), (1, 1, 1, 1)),
    ((1, 7, 13, 11), (1, 1), (1, 1, 1, 1)),
    ((2, 5, 17, 15), (2, 2), (1, 0, 1, 2)),
    ((1, 3, 7, 7), (1, 1), (0, 0, 0, 0)),
    ((2, 4, 20, 37), (2, 2), (2, 1, 0, 3)),  # wide rows, two images, stride phases, uneven padding
]


@pytest.mark.parametrize("level", ["x86-64", *LEVELS])
@pytest.mark.parametrize("x_shape, strides, padding", DEPTHWISE)
def test_depthwise_convolutions_match_numpy(level, x_shape, strides, padding):
    """Wide planar tiles on SSE-only x86-64 (four lanes) and for AVX-512's large maps of stride 1,
    channel-blocked kernel calls (conv_depthwise) otherwise."""
    channels = x_shape[1]
    source = _check(x_shape, (channels, 1, 3, 3), level, strides=strides, padding=padding, groups=channels)
    lanes = float32_lanes(Target(f"c -mcpu={level}"))
    widths = [int(line.split("[")[1].split("]")[0]) for line in source.splitlines()
              if "float conv2d" in line and "_tile[" in line]
    if level == "x86-64" or (lanes == 16 and x_shape[2] == 56):  # (AVX-512 keeps planar 56x56 maps of stride 1)
        assert widths and all(w in SINGLE_CHANNEL_WIDTHS and w <= 8 * lanes for w in widths)
        assert DEPTHWISE_SYMBOL not in source
    else:
        assert not widths and f"{DEPTHWISE_SYMBOL}(" in source


@pytest.mark.parametrize("level, want", [("x86-64-v3", 64), ("x86-64-v4", 128)])
def test_one_channel_tiles_hold_eight_vectors_where_the_output_fills_them(level, want):
    sched = ScheduleContext(Target(f"c -mcpu={level}"))
    large = ConvGeometry((1, 96, 56, 56), (3, 3), (1, 1), (1, 1), 1, 1, in_spatial=(56, 56)).scheduled(sched)
    small = ConvGeometry((1, 96, 7, 7), (3, 3), (1, 1), (1, 1), 1, 1, in_spatial=(7, 7)).scheduled(sched)
    assert large.chosen_tile == (1, want, 0)
    assert small.tile_width == 16  # 49 positions: one 16-wide tile in three


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("x_shape, w_shape, strides, padding, groups", [
    ((1, 6, 9, 33), (8, 6, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((2, 6, 11, 50), (4, 3, 3, 5), (2, 3), (0, 2, 3, 1), 2),
    ((1, 2, 4, 30), (4, 2, 5, 3), (1, 1), (3, 1, 2, 1), 1),  # padding rows above and below the image
])
def test_wide_planes_are_copied_by_loops_bounded_by_the_padding(level, x_shape, w_shape, strides, padding, groups):
    source = _check(x_shape, w_shape, level, strides=strides, padding=padding, groups=groups)
    assert "planes_buf[" in source and "? p0[" not in source  # no select left in the copy


@pytest.mark.parametrize("size, begin, stride, phase, extent, want", [
    (56, 1, 1, 0, 59, (1, 57)),  # one zero row above, two below (the tiles' reach)
    (56, 0, 1, 0, 56, (0, 56)),
    (15, 1, 2, 0, 9, (1, 8)),  # rows 2r - 1 for r = 1..7
    (15, 1, 2, 1, 9, (0, 8)),  # rows 2r for r = 0..7
    (3, 5, 1, 0, 4, (4, 4)),  # the padding covers the whole extent
])
def test_inside_is_the_range_that_reads_the_image(size, begin, stride, phase, extent, want):
    assert inside(size, begin, stride, phase, extent) == want
    lo, hi = want
    assert all((0 <= i * stride + phase - begin < size) == (lo <= i < hi) for i in range(extent))
