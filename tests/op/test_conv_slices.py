"""Dilated 1-d and 3-d convolutions through 2-d regions (op.nn.conv_slices): numerics against onnxruntime,
which schedule each takes, and the scratch they need (no padded blow-up)."""

from __future__ import annotations

import platform
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.op.nn import conv as conv_module
from tessera.op.nn import conv_slices
from tessera.op.nn.conv_regions import DimGeometry, Span, tap_pieces, tap_spans
from tessera.op.nn.conv_schedule import ConvGeometry
from tessera.op.nn.conv_slices import DepthPlan, plan_depth
from tessera.target.simd import missing_level_features
from tessera.testing.models import ort_session
from tessera.testing.scratch import largest_scratch
from tessera.transform import PassContext
from tessera.transform.split_dilated_conv import SplitDilatedConv
from tessera.transform.trim_conv_taps import TrimConvTaps

# the graph passes that trim and split dilated convolutions off: these tests run the convolution op's own paths
OP_PATHS = PassContext(disabled_pass=(TrimConvTaps.name, SplitDilatedConv.name))


def conv_model(c: int, oc: int, spatial: tuple[int, ...], k: int, dilation: tuple[int, ...], pads: tuple[int, ...],
               strides: tuple[int, ...], groups: int = 1, batch: int = 1) -> onnx.ModelProto:
    """One Conv (with bias) and a ReLU, so the stitch also carries an epilogue."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((oc, c // groups, *(k,) * len(spatial))).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], dilations=list(dilation), pads=list(pads),
                            strides=list(strides), group=groups)
    graph = helper.make_graph(
        [conv, helper.make_node("Relu", ["y"], ["z"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, *spatial])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def sliced(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each convolution built went through the slices (`sliced_conv` did not decline it)."""
    taken: list[bool] = []

    def spy(*args: object) -> object:
        result = real(*args)
        taken.append(result is not None)
        return result

    real = conv_module.sliced_conv
    monkeypatch.setattr(conv_module, "sliced_conv", spy)
    return taken


def check_against_onnxruntime(model: onnx.ModelProto, shape: tuple[int, ...], target: str = "c") -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    mod, params = from_onnx(model)
    out = tessera.build(mod, target=target, params=params, ctx=OP_PATHS)(x)[0]
    ref = ort_session(model).run(None, {"x": x})[0]
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length, dilation, regions", [(40, 1, False), (40, 2, False), (40, 12, False),
                                                       (8, 12, True), (20, 24, True)])
def test_dilated_conv1d_matches_onnxruntime(sliced: list[bool], length: int, dilation: int, regions: bool) -> None:
    # padding = dilation; at 8 and 20 long, dilations 12 and 24 leave most taps in the padding: regions pay
    check_against_onnxruntime(conv_model(6, 16, (length,), 3, (dilation,), (dilation,) * 2, (1,)), (1, 6, length))
    assert sliced == [regions]


@pytest.mark.parametrize("strides, pads, groups, batch", [((2,), (24, 24), 1, 1), ((3,), (26, 24), 1, 2),
                                                          ((1,), (24, 24), 8, 1), ((2,), (20, 26), 4, 2)])
def test_strided_grouped_batched_dilated_conv1d(sliced: list[bool], strides: tuple[int], pads: tuple[int, int],
                                                groups: int, batch: int) -> None:
    check_against_onnxruntime(conv_model(8, 8, (17,), 3, (24,), pads, strides, groups, batch), (batch, 8, 17))
    assert sliced == [True]


@pytest.mark.parametrize("dilation", [(1, 1, 1), (2, 2, 2), (12, 12, 12), (5, 1, 1), (1, 3, 6)])
def test_dilated_conv3d_matches_onnxruntime(sliced: list[bool], dilation: tuple[int, int, int]) -> None:
    pads = dilation + dilation  # padding = dilation on every side
    check_against_onnxruntime(conv_model(4, 8, (9, 10, 11), 3, dilation, pads, (1, 1, 1)), (1, 4, 9, 10, 11))
    assert sliced == [max(dilation) > 1]  # undilated ones keep the tiled schedule


@pytest.mark.parametrize("strides, pads, groups, batch", [((2, 1, 2), (6, 5, 4, 3, 7, 6), 1, 1),
                                                          ((1, 2, 3), (6, 0, 9, 6, 6, 1), 1, 2),
                                                          ((2, 2, 2), (6,) * 6, 4, 1),  # grouped
                                                          ((1, 1, 1), (6,) * 6, 8, 2)])  # depthwise
def test_strided_grouped_batched_dilated_conv3d(sliced: list[bool], strides: tuple[int, int, int],
                                                pads: tuple[int, ...], groups: int, batch: int) -> None:
    check_against_onnxruntime(conv_model(8, 8, (9, 10, 11), 3, (6, 6, 6), pads, strides, groups, batch),
                              (batch, 8, 9, 10, 11))
    assert sliced == [True]


@pytest.mark.parametrize("spatial, k, dilation, pad", [((8,), 3, 12, 14), ((5, 6, 7), 1, 2, 2)])
def test_outputs_whose_taps_all_read_padding_are_the_bias(sliced: list[bool], spatial: tuple[int, ...], k: int,
                                                          dilation: int, pad: int) -> None:
    # no tap of the first two outputs along each dim reaches the input (in 1-d: taps read -14, -2, 10 and -13,
    # -1, 11 of 8): no region or piece covers them
    d = len(spatial)
    model = conv_model(4, 8, spatial, k, (dilation,) * d, (pad,) * (2 * d), (1,) * d)
    check_against_onnxruntime(model, (1, 4, *spatial))
    assert sliced == [True]


@pytest.mark.skipif(platform.machine() != "x86_64" or bool(missing_level_features("x86-64-v3")),
                    reason="runs AVX2 code: needs an x86-64-v3 CPU")
@pytest.mark.parametrize("spatial, dilation", [((20,), (24,)), ((9, 10, 11), (2, 2, 2)), ((9, 10, 11), (12, 12, 12))])
def test_avx2_code_path(sliced: list[bool], spatial: tuple[int, ...], dilation: tuple[int, ...]) -> None:
    """The 8-lane register tiles (the native target on an AVX-512 machine takes 16 lanes)."""
    d = len(spatial)
    model = conv_model(6, 16, spatial, 3, dilation, dilation * 2, (1,) * d)
    check_against_onnxruntime(model, (1, 6, *spatial), target="c -mcpu=x86-64-v3")
    assert sliced == [True]


def test_depth_taps_cover_only_the_output_depths_where_they_read_the_input() -> None:
    # dilation 12 on a depth of 9: taps 0 and 2 read depths -12.. and 12..: padding for every output
    g = ConvGeometry((1, 8, 9, 10, 11), (3, 3, 3), (1, 1, 1), (12, 12, 12), 4, 8, in_spatial=(9, 10, 11))
    plan = plan_depth((9, 10, 11), g, (12, 12, 12), (12, 12, 12))
    assert plan.spans == (Span(0, 9, 1, 2),) and plan.slices_copied() == 9
    assert plan.slab is not None and not plan.across  # the 2-d slices split into regions too, so per tap
    # dilation 6 on 16: the windows of the spans of constant tap range would copy 12 + 16 + 12 slices,
    # the taps alone 10 + 16 + 10
    g = ConvGeometry((1, 8, 16, 10, 11), (3, 3, 3), (1, 1, 1), (6, 1, 1), 4, 8, in_spatial=(16, 10, 11))
    plan = plan_depth((16, 10, 11), g, (6, 1, 1), (6, 1, 1))
    assert not plan.across and plan.slab is None
    assert plan.spans == (Span(6, 16, 0, 1), Span(0, 16, 1, 2), Span(0, 10, 2, 3)) and plan.slices_copied() == 36
    # dilation 2: the windows overlap little, each slice is copied about once (per tap: about thrice), and
    # the spans take their taps across images
    g = ConvGeometry((1, 8, 16, 10, 11), (3, 3, 3), (1, 1, 1), (2, 1, 1), 4, 8, in_spatial=(16, 10, 11))
    plan = plan_depth((16, 10, 11), g, (2, 1, 1), (2, 1, 1))
    assert plan.across and plan.spans == (Span(0, 2, 1, 3), Span(2, 14, 0, 3), Span(14, 16, 0, 2))
    assert plan.slices_copied() == 4 + 16 + 4
    # stride 2 and dilation 2 read the even depths only: the windows (3, 17 and 3 depths) copy those
    g = ConvGeometry((1, 8, 9, 10, 11), (3, 3, 3), (2, 1, 1), (2, 1, 1), 4, 8, in_spatial=(17, 10, 11))
    plan = plan_depth((17, 10, 11), g, (2, 1, 1), (2, 1, 1))
    assert plan.across and plan.step == 2 and plan.spans == (Span(0, 1, 1, 3), Span(1, 8, 0, 3), Span(8, 9, 0, 2))
    assert plan.slices_copied() == 2 + 9 + 2  # per tap: 8 + 9 + 8


@pytest.mark.parametrize("across", [True, False])
@pytest.mark.parametrize("dilation, strides, pads, groups, batch", [
    ((2, 2, 2), (2, 1, 1), (2, 1, 3, 3, 2, 1), 1, 2),  # strided depth, two images
    ((3, 1, 2), (3, 2, 1), (4, 1, 2, 2, 0, 2), 4, 1),  # grouped
    ((2, 3, 1), (1, 1, 2), (2, 3, 1, 1, 3, 0), 8, 2),  # depthwise
])
def test_both_depth_plans_match_onnxruntime(monkeypatch: pytest.MonkeyPatch, across: bool,
                                            dilation: tuple[int, ...], strides: tuple[int, ...],
                                            pads: tuple[int, ...], groups: int, batch: int) -> None:
    """Whichever depth plan `plan_depth` would pick, spans with their taps across images or one tap per piece
    (each 2-d slice as one plane) compute the convolution."""
    made: list[DepthPlan] = []

    def forced(in_spatial: Sequence[int], g: ConvGeometry, begins: Sequence[int], ends: Sequence[int]) -> DepthPlan:
        depth = DimGeometry(in_spatial[0], g.out_shape[2], g.kernel[0], g.strides[0], g.dilation[0], begins[0])
        made.append(DepthPlan(depth, tap_spans(depth) if across else tap_pieces(depth), across, None))
        return made[-1]

    monkeypatch.setattr(conv_slices, "plan_depth", forced)
    model = conv_model(8, 8, (9, 10, 11), 3, dilation, pads, strides, groups, batch)
    check_against_onnxruntime(model, (batch, 8, 9, 10, 11))
    assert len(made) == 1


# The scratch depends on the register tiles, so each case names its ISA level (built only, never run):
# the native target would make the bounds depend on the CPU the tests run on.
@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("dilation", [24, 100])
def test_dilated_conv1d_scratch_does_not_grow_with_the_dilation(dilation: int, level: str) -> None:
    """The tiled schedule copied the input padded by the dilation on both sides: 232 wide for 32 at dilation 100
    (7x the input). The regions' scratch is mostly their output tiles (positions rounded up to whole tiles)."""
    channels, length = 64, 32
    model = conv_model(channels, channels, (length,), 3, (dilation,), (dilation,) * 2, (1,))
    size, buffers = largest_scratch(model, f"c -mcpu={level}", OP_PATHS)
    assert size <= 4.5 * channels * length * 4, (size / (channels * length * 4), buffers)
    assert not any(name.startswith("pad") for name, _ in buffers), buffers


@pytest.mark.parametrize("level, dilation, bound", [
    ("x86-64-v4", 2, 0.75), ("x86-64-v4", 6, 1.0), ("x86-64-v4", 12, 0.1), ("x86-64-v4", 18, 0.05),
    # AVX2's tiles are half as wide, so the tiled schedule's own scratch is smaller: at dilation 2 the slices
    # take 1.04x it (the same 4.5x the input as on AVX-512)
    ("x86-64-v3", 2, 1.1), ("x86-64-v3", 6, 1.0), ("x86-64-v3", 12, 0.1), ("x86-64-v3", 18, 0.05)])
def test_dilated_conv3d_scratch_against_the_tiled_schedule(monkeypatch: pytest.MonkeyPatch, level: str,
                                                           dilation: int, bound: float) -> None:
    """The tiled schedule copies the input padded by the dilation on all six sides: at dilation 18 on 12^3, 48 x 48 x
    66 (93x the input). The slices copy each depth slice once per depth tap that reads it, in 2-d planes (or
    regions) of their own: at most `bound` times the tiled schedule's scratch, and at dilation 12 or more (where
    the 2-d slices split into regions) at most 3x the input."""
    channels, side = 32, 12
    target = f"c -mcpu={level}"
    model = conv_model(channels, channels, (side,) * 3, 3, (dilation,) * 3, (dilation,) * 6, (1, 1, 1))
    sliced, buffers = largest_scratch(model, target, OP_PATHS)
    assert not any(name.startswith("pad") for name, _ in buffers), buffers
    monkeypatch.setattr(conv_module, "sliced_conv", lambda *args: None)
    tiled, tiled_buffers = largest_scratch(model, target, OP_PATHS)
    assert any(name.startswith("pad") for name, _ in tiled_buffers), tiled_buffers
    assert sliced <= bound * tiled, (sliced / tiled, buffers, tiled_buffers)
    if dilation >= 12:
        assert sliced <= 3 * channels * side ** 3 * 4, (sliced / (channels * side ** 3 * 4), buffers)
