"""Dilated and strided 2-d convolutions split into regions by the taps that reach the image (op.nn.conv_regions):
numerics against onnxruntime, the split itself, and the scratch it needs (no padded blow-up)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.op.nn import conv as conv_module
from tessera.op.nn.conv_regions import DimGeometry, RegionPlan, Span, merged, plan_regions, tap_pieces, tap_spans
from tessera.op.nn.conv_schedule import ConvGeometry
from tessera.testing.aspp import aspp_head
from tessera.testing.models import ort_session
from tessera.testing.scratch import largest_scratch
from tessera.transform import PassContext
from tessera.transform.split_dilated_conv import SplitDilatedConv
from tessera.transform.trim_conv_taps import TrimConvTaps

# the graph passes that trim and split dilated convolutions off: these tests run the convolution op's own paths
OP_PATHS = PassContext(disabled_pass=(TrimConvTaps.name, SplitDilatedConv.name))


def conv_model(c: int, oc: int, hw: tuple[int, int], k: int, dilation: int | tuple[int, int], pads: tuple[int, ...],
               strides: tuple[int, int] = (1, 1), groups: int = 1, seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """One Conv (with bias) and a ReLU, so the region stitch also carries an epilogue."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((oc, c // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    dilations = list(dilation) if isinstance(dilation, tuple) else [dilation] * 2
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], dilations=dilations, pads=list(pads),
                            strides=list(strides), group=groups)
    graph = helper.make_graph(
        [conv, helper.make_node("Relu", ["y"], ["z"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, *hw])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check_against_onnxruntime(model: onnx.ModelProto, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    mod, params = from_onnx(model)
    out = tessera.build(mod, params=params, ctx=OP_PATHS)(x)[0]
    ref = ort_session(model).run(None, {"x": x})[0]
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dilation", [1, 2, 6, 12, 24, 36])
def test_dilated_conv_matches_onnxruntime(dilation: int) -> None:
    # padding = dilation as in ASPP; 9 x 11 is smaller than most of these dilations
    check_against_onnxruntime(conv_model(6, 16, (9, 11), 3, dilation, (dilation,) * 4), (1, 6, 9, 11))


@pytest.mark.parametrize("strides, pads", [((2, 2), (6, 5, 4, 7)), ((3, 3), (2, 7, 5, 1)), ((1, 2), (0, 6, 6, 0)),
                                           ((3, 1), (7, 0, 1, 9))])
def test_strided_dilated_conv_with_asymmetric_pads(strides: tuple[int, int], pads: tuple[int, ...]) -> None:
    check_against_onnxruntime(conv_model(5, 8, (15, 13), 3, 6, pads, strides), (1, 5, 15, 13))


@pytest.mark.parametrize("groups, oc", [(4, 8), (8, 8)])  # grouped and depthwise
def test_grouped_dilated_conv(groups: int, oc: int) -> None:
    check_against_onnxruntime(conv_model(8, oc, (10, 10), 3, 4, (4,) * 4, groups=groups), (1, 8, 10, 10))


def test_batched_conv_dilated_along_one_dim() -> None:
    # dilation 24 along the width only (wider than the 10 columns), two images
    model = conv_model(16, 32, (12, 10), 3, (1, 24), (1, 24, 1, 24), batch=2)
    check_against_onnxruntime(model, (2, 16, 12, 10))


def test_aspp_head_matches_onnxruntime() -> None:
    model = aspp_head(channels=16, size=10)
    check_against_onnxruntime(model, (1, 16, 10, 10))


def test_taps_split_where_they_start_or_stop_reading_the_image() -> None:
    # dilation 36 on 14: only the centre tap ever reads the image
    assert tap_spans(DimGeometry(14, 14, 3, 1, 36, 36)) == (Span(0, 14, 1, 2),)
    # dilation 12 on 14: the last tap reaches the image for outputs 0-1, the first for 12-13
    assert tap_spans(DimGeometry(14, 14, 3, 1, 12, 12)) == (Span(0, 2, 1, 3), Span(2, 12, 1, 2), Span(12, 14, 0, 2))
    # padding past the kernel's reach: the border outputs read nothing (they are the bias alone)
    assert tap_spans(DimGeometry(4, 8, 1, 1, 1, 2)) == (Span(0, 2, 0, 0), Span(2, 6, 0, 1), Span(6, 8, 0, 0))


def _geometry(size: int, dilation: int, stride: int = 1, channels: int = 8) -> ConvGeometry:
    out = (size + 2 * dilation - 2 * dilation - 1) // stride + 1
    return ConvGeometry((1, channels, out, out), (3, 3), (stride, stride), (dilation, dilation), channels, channels,
                        in_spatial=(size, size))


def test_undilated_convolutions_keep_the_one_plane_schedule() -> None:
    # no region split for ordinary 3x3 convolutions: their generated C stays as it was
    for size, stride in [(56, 1), (14, 1), (7, 1), (56, 2), (3, 1)]:
        assert plan_regions((size, size), _geometry(size, 1, stride), (1, 1), (1, 1)) is None
    plan = plan_regions((14, 14), _geometry(14, 36), (36, 36), (36, 36))
    assert plan is not None and plan.regions() == [(Span(0, 14, 1, 2), Span(0, 14, 1, 2))]


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])  # the tiles set the scratch: built, never run
@pytest.mark.parametrize("dilation, bound", [(36, 2.5), (24, 2.5), (12, 6.0)])
def test_dilated_scratch_is_a_small_multiple_of_the_input(dilation: int, bound: float, level: str) -> None:
    """The issue's case: a 3x3 of dilation 36 on 14x14 padded its input to 87 x 86 (44x the input, 28.7 MB
    at 2048 channels) and computed rows 86 wide. Now its scratch is the input's taps and the output tiles."""
    channels = 64
    model = conv_model(channels, channels, (14, 14), 3, dilation, (dilation,) * 4)
    size, buffers = largest_scratch(model, f"c -mcpu={level}", OP_PATHS)
    input_bytes = channels * 14 * 14 * 4
    assert size <= bound * input_bytes, (size / input_bytes, buffers)
    assert all(shape[-1] <= 16 for _, shape in buffers if len(shape) == 6), buffers  # no 86-wide planes


@pytest.mark.parametrize("k, dilation, strides, pads", [(1, 1, (2, 2), (0, 0, 0, 0)), (3, 2, (2, 2), (2, 1, 2, 3)),
                                                        (1, 1, (3, 2), (0, 1, 2, 0))])
def test_strided_conv_copies_only_the_phases_it_reads(k: int, dilation: int, strides: tuple[int, int],
                                                      pads: tuple[int, ...]) -> None:
    """Every tap of these reads stride phase 0 only (k * dilation divisible by the stride), so the planes hold
    that phase alone: a 1x1 convolution of stride 2 copies a quarter of its input, not all of it."""
    model = conv_model(8, 16, (16, 15), k, dilation, pads, strides)
    check_against_onnxruntime(model, (1, 8, 16, 15))
    _, buffers = largest_scratch(model, ctx=OP_PATHS)
    planes = [shape for name, shape in buffers if name.startswith("planes")]
    assert planes and all(shape[2:4] == (1, 1) for shape in planes), buffers


def _forced_plan(kind: str, made: list[RegionPlan]) -> Callable[..., RegionPlan]:
    """A stand-in for `plan_regions` that always splits, the way `kind` names (and keeps its plans in `made`)."""

    def plan(in_spatial: Sequence[int], g: ConvGeometry, begins: Sequence[int], ends: Sequence[int],
             sched: object = None) -> RegionPlan:
        made.append(_plan(in_spatial, g, begins))
        return made[-1]

    def _plan(in_spatial: Sequence[int], g: ConvGeometry, begins: Sequence[int]) -> RegionPlan:
        h, w = (DimGeometry(in_spatial[k], g.out_shape[2 + k], g.kernel[k], g.strides[k], g.dilation[k], begins[k])
                for k in range(2))
        dims = (h, w)
        channels = (g.in_channels_per_group * g.out_shape[1] // g.out_channels_per_group, g.in_channels_per_group,
                    g.out_shape[1])
        if kind == "per_tap":
            return RegionPlan(dims, channels, tap_pieces(dims[0]), tap_pieces(dims[1]), per_tap=True)
        rows, cols = tap_spans(dims[0]), tap_spans(dims[1])
        if kind == "rows":
            cols = (merged(cols),)
        if kind == "merged":
            rows, cols = (merged(rows),), (merged(cols),)
        return RegionPlan(dims, channels, rows, cols)

    return plan


@pytest.mark.parametrize("kind", ["per_tap", "fine", "rows", "merged"])
@pytest.mark.parametrize("c, oc, hw, dilation, pads, strides, groups", [
    (6, 8, (9, 11), 2, (2, 2, 2, 2), (1, 1), 1),  # window regions and several-tap gathered ones
    (5, 8, (15, 13), 6, (6, 5, 4, 7), (2, 3), 1),
    (8, 8, (10, 10), 4, (4, 3, 5, 4), (1, 1), 4),  # grouped
    (8, 8, (10, 10), 3, (3, 3, 3, 3), (2, 1), 8),  # depthwise
])
def test_every_plan_kind_matches_onnxruntime(monkeypatch: pytest.MonkeyPatch, kind: str, c: int, oc: int,
                                             hw: tuple[int, int], dilation: int, pads: tuple[int, ...],
                                             strides: tuple[int, int], groups: int) -> None:
    """Whatever plan the cost model would pick, each kind of split computes the convolution."""
    made: list[RegionPlan] = []
    monkeypatch.setattr(conv_module, "plan_regions", _forced_plan(kind, made))
    check_against_onnxruntime(conv_model(c, oc, hw, 3, dilation, pads, strides, groups), (1, c, *hw))
    assert made and made[0].per_tap == (kind == "per_tap")
