"""Dense convolutions as one GEMM over the padded input planes (op/nn/conv_planes_gemm.py): the weight packed
at compile time by PackGemmWeights into A micro-panels, B the implicit im2col matrix the
`ts_sgemm_<MR>x<NR>_planes` entry reads through row offsets. Against onnxruntime on AVX2, where the pass uses
it, and the plain fallback for targets without the microkernel."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import relay
from tessera.codegen import c_gemm
from tessera.codegen.c_gemm import DIRECT_ROWS
from tessera.codegen.c_library import gemm_function
from tessera.errors import TypeInferenceError
from tessera.frontend import from_onnx
from tessera.op.nn.conv import ConvAttrs, conv_reference
from tessera.op.nn.gemm import GemmKernel
from tessera.op.nn.conv_planes_gemm import (
    PlaneLayout,
    conv2d_planes_prepacked,
    pack_planes_weights,
    planes_gemm_kernel,
    unpack_planes_weights,
)
from tessera.relay.expr import Constant
from tessera.target import Target
from tessera.testing.isa import require_level
from tessera.testing.models import ort_session
from tessera.transform.infer_type import infer_function

AVX2 = "c -mcpu=x86-64-v3"
# (in channels, out channels, kernel, strides, pads (top, left, bottom, right), dilation, map): VGG's 3x3,
# out channels ragged against MR = 6, a ResNet stem (7x7 stride 2, 3 channels), a strided 1x1 projection, an
# asymmetric pad, a 5x5 with stride 2 on an odd map; outputs at least a micro-panel (16) wide, whose panels run
# over a row's end in two runs: 37 wide, and a SqueezeNet-like stem (3x3, stride 2, unpadded) 23 wide
SHAPES = [
    (16, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (14, 14)),
    (8, 21, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (9, 11)),
    (3, 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), (32, 32)),
    (32, 64, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), (16, 16)),
    (12, 24, (3, 3), (1, 1), (0, 1, 2, 0), (1, 1), (10, 12)),
    (10, 18, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), (15, 13)),
    (8, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (12, 37)),
    (3, 32, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), (47, 47)),
]


def conv_model(c, oc, kernel, strides, pads, dilation, hw, batch, relu_first=False):
    """Conv with bias, then Relu (the epilogue runs in the copy out of the product); `relu_first`: a Relu
    feeds the convolution too."""
    rng = np.random.default_rng(c * 31 + oc)
    w = (rng.standard_normal((oc, c, *kernel)) / np.sqrt(c * kernel[0] * kernel[1])).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["xr"])] if relu_first else []
    nodes += [helper.make_node("Conv", ["xr" if relu_first else "x", "w", "b"], ["y"], kernel_shape=list(kernel),
                               strides=list(strides), pads=[pads[0], pads[1], pads[2], pads[3]],
                               dilations=list(dilation)),
              helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, *hw])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def kernel_ops(lib) -> list[tuple[str, ...]]:
    graph = json.loads(lib.graph_json)
    return [tuple(n.get("ops", ())) for n in graph["nodes"] if n["op"] == "kernel"]


def _pitched_everywhere(monkeypatch) -> None:
    """Make every convolution read pitched planes (PlaneLayout.choose would shift the small ones)."""
    pitched_of = PlaneLayout.of
    monkeypatch.setattr(PlaneLayout, "choose", classmethod(
        lambda cls, i, o, strides, padding, kernel, dilation: pitched_of(i[2:], strides, padding, kernel, dilation)))


@pytest.mark.parametrize("layout", ["chosen", "pitched"])
@pytest.mark.parametrize("c, oc, kernel, strides, pads, dilation, hw", SHAPES)
def test_convolutions_as_one_gemm_over_planes_match_onnxruntime(c, oc, kernel, strides, pads, dilation, hw, layout,
                                                                monkeypatch):
    if layout == "pitched":
        _pitched_everywhere(monkeypatch)
    model = conv_model(c, oc, kernel, strides, pads, dilation, hw, batch=2)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target=AVX2)
    assert [ops[0] for ops in kernel_ops(lib)] == ["nn.conv2d_planes_prepacked"]
    source = "".join(text for name, text in lib.c_sources.items() if name != "kernels_library.c")
    assert re.search(r"ts_sgemm_6x16_planes(_fused)?\(", source), "the kernel calls the planes entry"
    require_level("x86-64-v3")
    x = np.random.default_rng(1).standard_normal((2, c, *hw)).astype(np.float32)
    want = ort_session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c, oc, kernel, strides, pads, hw", [
    (3, 64, (7, 7), (2, 2), (3, 3, 3, 3), (45, 38)),  # ResNet's stem, on a small image
    (3, 24, (3, 3), (2, 2), (0, 0, 0, 0), (33, 29)),  # SqueezeNet's, unpadded
    (1, 20, (10, 4), (2, 2), (4, 1, 5, 2), (49, 10)),  # a keyword spotter's, one channel
])
def test_an_avx512_stem_is_one_gemm_over_planes(c, oc, kernel, strides, pads, hw):
    """On AVX-512 only a network's stem (STEM_MAX_CHANNELS channels in) takes the planes GEMM, with its
    32-column tiles."""
    model = conv_model(c, oc, kernel, strides, pads, (1, 1), hw, batch=1)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target="c -mcpu=x86-64-v4")
    assert [ops[0] for ops in kernel_ops(lib)] == ["nn.conv2d_planes_prepacked"]
    source = "".join(text for name, text in lib.c_sources.items() if name != "kernels_library.c")
    assert re.search(r"ts_sgemm_(8|12)x32_planes(_fused)?\(", source), "the kernel calls a 32-column planes entry"
    require_level("x86-64-v4")
    x = np.random.default_rng(2).standard_normal((1, c, *hw)).astype(np.float32)
    np.testing.assert_allclose(lib(x)[0], ort_session(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_computed_input_is_padded_by_a_select():
    """A Relu fused in front of the convolution: its planes are a computed stage, not the copy loops."""
    model = conv_model(8, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (12, 12), batch=1, relu_first=True)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target=AVX2)
    assert any(ops[0] == "nn.conv2d_planes_prepacked" for ops in kernel_ops(lib))
    require_level("x86-64-v3")
    x = np.random.default_rng(2).standard_normal((1, 8, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(lib(x)[0], ort_session(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_packing_round_trips():
    w = np.random.default_rng(3).standard_normal((21, 5, 3, 2)).astype(np.float32)
    packed = pack_planes_weights(w, 6)
    assert packed.shape == (4, 30, 6) and not packed[3, :, 3:].any()  # 21 rows: the last panel's 3 are zero
    np.testing.assert_array_equal(unpack_planes_weights(packed, 21, 5, (3, 2)), w)


def test_plane_layout_holds_every_tap_and_the_dropped_columns():
    # 56 + 2 padded rows, one more for the dropped columns' reads; stride 2 halves both (rounding up)
    assert PlaneLayout.of((56, 56), (1, 1), (1, 1, 1, 1)) == PlaneLayout(59, 58)
    assert PlaneLayout.of((224, 224), (2, 2), (3, 3, 3, 3), (7, 7)) == PlaneLayout(116, 115, (2, 2))
    # a column stride of 1: a plane per column tap, as wide as the output, none for a larger stride
    shifted = PlaneLayout.shifted_of((56, 56), (1, 1), (1, 1, 1, 1), (3, 3))
    assert shifted == PlaneLayout(59, 56, (1, 3), 1) and shifted.shifted and shifted.floats(64) == 64 * 3 * 59 * 56
    assert PlaneLayout.shifted_of((56, 56), (2, 1), (1, 1, 1, 1), (3, 3)) == PlaneLayout(30, 56, (2, 3), 1)
    assert PlaneLayout.shifted_of((56, 56), (1, 2), (1, 1, 1, 1), (3, 3)) is None  # a column stride of 2
    assert PlaneLayout.shifted_of((56, 56), (1, 1), (2, 2, 2, 2), (3, 3), (2, 2)) is None  # dilated
    assert not PlaneLayout.of((56, 56), (1, 1), (1, 1, 1, 1)).shifted


def test_shifted_planes_where_the_output_is_narrower_than_a_micro_panel():
    def choose(in_shape, out_channels):
        out_shape = (1, out_channels, *in_shape[2:])
        return PlaneLayout.choose(in_shape, out_shape, (1, 1), (1, 1, 1, 1), (3, 3), (1, 1)).shifted

    assert choose((1, 96, 14, 14), 128)  # every 16-column panel would span two or three output rows
    assert choose((1, 512, 7, 7), 512)
    assert not choose((1, 64, 16, 16), 64)  # whole panels per row
    assert not choose((1, 64, 28, 28), 128)  # at most one panel in two over a row's end
    assert not choose((1, 1024, 15, 15), 64)  # 3.5 MB of shifted planes: past MAX_SHIFTED_BYTES
    strided = PlaneLayout.choose((1, 64, 56, 56), (1, 64, 28, 28), (2, 2), (1, 1, 1, 1), (3, 3), (1, 1))
    assert not strided.shifted  # a column stride of 2 keeps the pitched planes


    # every tap of a strided 1x1 (or of a 3x3 of dilation 2, stride 2) reads stride phase 0: only it is copied
    assert PlaneLayout.of((56, 56), (2, 2), (0, 0, 0, 0), (1, 1)).phases == (1, 1)
    assert PlaneLayout.of((56, 56), (2, 2), (2, 2, 2, 2), (3, 3), (2, 2)).phases == (1, 1)


def test_which_convolutions_the_pass_packs():
    plain = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1))
    avx2, avx512 = Target(AVX2), Target("c -mcpu=x86-64-v4")
    assert planes_gemm_kernel(avx2, (1, 64, 56, 56), (1, 64, 56, 56), (3, 3), plain) is not None
    assert planes_gemm_kernel(avx512, (1, 64, 56, 56), (1, 64, 56, 56), (3, 3), plain) is None  # blocked tiles win
    stem = ConvAttrs((2, 2), (3, 3, 3, 3), (1, 1))
    assert planes_gemm_kernel(avx512, (1, 3, 224, 224), (1, 64, 112, 112), (7, 7), stem) == GemmKernel(8, 32)
    assert planes_gemm_kernel(avx512, (1, 5, 224, 224), (1, 64, 112, 112), (7, 7), stem) is None
    assert planes_gemm_kernel(Target("c -mcpu=cortex-m4"), (1, 64, 56, 56), (1, 64, 56, 56), (3, 3), plain) is None
    grouped = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), groups=2)
    assert planes_gemm_kernel(avx2, (1, 64, 56, 56), (1, 64, 56, 56), (3, 3), grouped) is None
    assert planes_gemm_kernel(avx2, (1, 64, 56, 56), (1, 8, 56, 56), (3, 3), plain) is None  # too few output channels
    assert planes_gemm_kernel(avx2, (1, 64, 3, 3), (1, 64, 3, 3), (3, 3), plain) is None  # 3 x 5 positions
    dilated = ConvAttrs((1, 1), (2, 2, 2, 2), (2, 2))  # its padding is conv_regions' to skip
    assert planes_gemm_kernel(avx2, (1, 64, 56, 56), (1, 64, 56, 56), (3, 3), dilated) is None
    assert planes_gemm_kernel(avx2, (1, 8192, 14, 14), (1, 64, 14, 14), (3, 3), plain) is None  # 73,728 rows
    assert planes_gemm_kernel(avx2, (1, 512, 2048, 2048), (1, 64, 2048, 2048), (1, 3), plain) is None  # 2**31 floats


def _packed_call(x_shape, weight, attrs: ConvAttrs, mr=6, nr=16):
    x = relay.Var("x", relay.TensorType(x_shape, "float32"))
    call = conv2d_planes_prepacked(x, Constant(pack_planes_weights(weight, mr)), channels=weight.shape[0],
                                   kernel_size=weight.shape[2:], strides=attrs.strides, padding=attrs.padding,
                                   dilation=attrs.dilation, panel_width=nr)
    return relay.Function([x], call)


@pytest.mark.parametrize("target, level, gemm", [("c -mcpu=x86-64", "x86-64", False),
                                                  ("c -mcpu=x86-64-v4", "x86-64-v4", True)])
def test_the_op_runs_on_any_target(target, level, gemm):
    """Built by hand for SSE, which has no microkernel, the op is a plain reduction over the packed weight;
    for AVX-512, which has a 6x16 one too, it calls the planes entry. Same result either way."""
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((10, 4, 3, 3)).astype(np.float32)
    attrs = ConvAttrs((2, 1), (1, 0, 1, 2), (1, 1))
    lib = tessera.build(relay.IRModule.from_expr(_packed_call((1, 4, 9, 8), weight, attrs)), target=target)
    assert ("ts_sgemm_6x16_planes(" in "".join(lib.c_sources.values())) == gemm
    require_level(level)
    x = rng.standard_normal((1, 4, 9, 8)).astype(np.float32)
    np.testing.assert_allclose(lib(x)[0], conv_reference([x, weight], attrs), rtol=1e-4, atol=1e-4)


def test_a_weight_of_the_wrong_shape_is_refused_by_name():
    weight = np.zeros((10, 4, 3, 3), np.float32)
    func = _packed_call((1, 5, 9, 8), weight, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1)))  # 5 input channels
    with pytest.raises(TypeInferenceError, match=r"conv2d_planes_prepacked|packed weight"):
        infer_function(func)


@pytest.mark.parametrize("oc", [16, DIRECT_ROWS, DIRECT_ROWS + 1])
def test_few_output_channels_read_the_planes_in_place_with_the_same_bits(oc, monkeypatch):
    """At most DIRECT_ROWS rows of C read the implicit im2col's rows where they lie in the planes (through the
    row offsets) instead of packing them: the same multiply-adds in the same order, so the same bits as packed."""
    model = conv_model(8, oc, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (13, 21), batch=2)
    mod, params = from_onnx(model)
    direct = tessera.build(mod, params=params, target=AVX2)
    in_place = "const int direct = DIRECT_ROWS > 0 && !bp && b_cs == 1"
    assert in_place in direct.c_sources["kernels_library.c"]
    plain_driver = c_gemm.driver_source
    monkeypatch.setattr(c_gemm, "driver_source", lambda g: plain_driver(g).replace(in_place, in_place + " && !b_rows"))
    gemm_function.cache_clear()
    try:
        packed = tessera.build(mod, params=params, target=AVX2)
    finally:
        monkeypatch.undo()
        gemm_function.cache_clear()
    assert "!b_rows" in packed.c_sources["kernels_library.c"]
    require_level("x86-64-v3")
    x = np.random.default_rng(4).standard_normal((2, 8, 13, 21)).astype(np.float32)
    np.testing.assert_array_equal(direct(x)[0], packed(x)[0])
    np.testing.assert_allclose(direct(x)[0], ort_session(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


# outputs 14 wide: every pitched panel spans two or three rows (`_pack_b_wrapped`'s column table); 20 wide: one
# panel in two runs over a row's end (its two-run copy), with a residual; a row stride of 2: two row phases
@pytest.mark.parametrize("residual, strides, hw", [(False, (1, 1), (14, 14)), (True, (1, 1), (14, 14)),
                                                   (True, (1, 1), (20, 20)), (False, (2, 1), (28, 14))])
def test_pitched_and_shifted_planes_write_the_output_with_the_same_bits(residual, strides, hw, monkeypatch):
    """Either layout makes C the NCHW output: the GEMM writes it, bias, residual and Relu run on its tiles (the
    fused entry), and no product is copied out of a scratch buffer; the same products in the same order, so
    the same bits."""
    c, oc = 16, 32
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((oc, c, 3, 3)) / 12).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=list(strides))]
    if residual:  # r: the input's first 32 channels twice over, a residual of the output's shape
        nodes += [helper.make_node("Concat", ["x", "x"], ["r"], axis=1), helper.make_node("Add", ["y", "r"], ["s"])]
    nodes += [helper.make_node("Relu", ["s" if residual else "y"], ["z"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, *hw])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = from_onnx(model)
    monkeypatch.setattr(PlaneLayout, "choose", classmethod(
        lambda cls, i, o, strides, padding, kernel, dilation: cls.shifted_of(i[2:], strides, padding, kernel)))
    shifted = tessera.build(mod, params=params, target=AVX2)
    _pitched_everywhere(monkeypatch)
    pitched = tessera.build(mod, params=params, target=AVX2)
    for lib in (shifted, pitched):
        kernels = "".join(text for name, text in lib.c_sources.items() if name != "kernels_library.c")
        assert "ts_sgemm_6x16_planes_fused(" in kernels and "conv2d_gemm_buf" not in kernels
    assert shifted.c_sources != pitched.c_sources
    require_level("x86-64-v3")
    x = np.random.default_rng(8).standard_normal((2, c, *hw)).astype(np.float32)
    np.testing.assert_array_equal(shifted(x)[0], pitched(x)[0])
    np.testing.assert_allclose(pitched(x)[0], ort_session(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
