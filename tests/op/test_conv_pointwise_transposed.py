"""Pointwise convolutions computed as outᵀ = Xᵀ Wᵀ: positions as the GEMM microkernel's rows, the constant weight
packed as Wᵀ's B micro-panels (`nn.conv2d_pointwise_transposed`, op/nn/conv_prepacked.py), the product transposed
into NCHW by `ts_transpose_float32` (codegen/c_transpose.py); and how PackGemmWeights picks that form or the
channels-as-rows one (`conv_gemm.prepacked_pointwise_plan`). C is built for x86-64-v3 and -v4 on any x86-64 host
and run where this CPU has the level."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.codegen.c_library import calling_units
from tessera import relay
from tessera.errors import TypeInferenceError
from tessera.frontend import from_onnx
from tessera.op.nn import conv
from tessera.op.nn.conv_gemm import (PREPACKED_MIN_POSITIONS, PackedPointwise, pack_pointwise_weights,
                                     prepacked_pointwise_kernel, prepacked_pointwise_plan, product_cost,
                                     transposed_pointwise_kernel)
from tessera.op.nn.conv_prepacked import conv2d_pointwise_prepacked, conv2d_pointwise_transposed
from tessera.op.nn.conv_schedule import ConvGeometry
from tessera.op.nn.gemm import GemmKernel, pack_b_panels
from tessera.relay.visitor import iter_calls
from tessera.target import Target
from tessera.target.simd import float32_lanes
from tessera.testing.isa import require_level
from tessera.testing.models import ort_session
from tessera.transform.infer_type import infer_function
from tessera.transform.pack_gemm_weights import pack_gemm_weights

LEVELS = {"c -mcpu=x86-64-v3": "x86-64-v3", "c -mcpu=x86-64-v4": "x86-64-v4"}


def _geometry(c: int, oc: int, hw: tuple[int, int], groups: int = 1, batch: int = 1) -> ConvGeometry:
    return ConvGeometry((batch, oc, *hw), (1, 1), (1, 1), (1, 1), c // groups, oc // groups)


def pointwise_model(c: int, oc: int, hw: tuple[int, int], batch: int) -> onnx.ModelProto:
    """A 1x1 Conv with bias, then Relu: the epilogue runs in place after the transpose."""
    rng = np.random.default_rng(c * oc)
    w = rng.standard_normal((oc, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1]), helper.make_node("Relu", ["y"], ["z"])],
        "pointwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, *hw])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# (in channels, out channels, map): 9, 36 and 49 positions (ragged against every MR and below the 8-row
# transpose block), a deep reduction on 7x7, 96 channels (three 32-wide or six 16-wide panels)
SHAPES = [(64, 64, (3, 3)), (40, 128, (6, 6)), (24, 96, (7, 7)), (384, 64, (7, 7))]


@pytest.mark.parametrize("target", list(LEVELS))
@pytest.mark.parametrize("c, oc, hw", SHAPES)
def test_small_maps_run_transposed_and_match_onnxruntime(c, oc, hw, target):
    model = pointwise_model(c, oc, hw, batch=2)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target=target)
    source = "".join(calling_units(lib.c_sources).values())
    assert re.search(r"(?<!static void )ts_sgemm_\d+x\d+_prepacked\(", source), "B read from compile-time panels"
    assert re.search(r"(?<!static void )ts_transpose_float32\(", source)
    assert "_prepacked_a(" not in source and "planes_buf" not in source
    require_level(LEVELS[target])
    x = np.random.default_rng(1).standard_normal((2, c, *hw)).astype(np.float32)
    want = ort_session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", list(LEVELS))
def test_the_pass_packs_the_transposed_weight_as_b_panels(target):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 24, 1, 1)).astype(np.float32)
    x = relay.Var("x", relay.TensorType((2, 24, 3, 3), "float32"))
    func = relay.Function([x], conv.conv2d(x, relay.const(w), strides=(1, 1), padding=(0, 0, 0, 0),
                                           dilation=(1, 1)))
    packed = pack_gemm_weights(infer_function(func), Target(target))
    (call,) = [c for c in iter_calls(packed) if c.op is conv2d_pointwise_transposed]
    wp = call.args[1].data
    nr = 2 * float32_lanes(Target(target))  # the kernels' NR: 32 for AVX-512, 16 for AVX2
    assert wp.shape == (1, 64 // nr, 24, nr) and call.attrs.channels == 64
    np.testing.assert_array_equal(wp[0], pack_b_panels(w[:, :, 0, 0].T, nr))  # what `_pack_b` builds at run time
    assert GemmKernel(call.attrs.panel_height, nr).mr == call.attrs.panel_height
    assert call.checked_type_ == relay.TensorType((2, 64, 3, 3), "float32")


@pytest.mark.parametrize("target", list(LEVELS))
@pytest.mark.parametrize("channels, hw", [(20, (3, 5)), (37, (4, 4)), (50, (2, 11)), (8, (1, 1))])
def test_the_op_with_ragged_channels_and_positions(channels, hw, target):
    """Built by hand: output channels not a multiple of the vector width, positions not a multiple of the
    8 x 8 transpose blocks or of MR, two images."""
    rng = np.random.default_rng(channels)
    nr = 2 * float32_lanes(Target(target))
    kernel = GemmKernel(6, 16) if nr == 16 else GemmKernel(12, 32)
    w = rng.standard_normal((channels, 19, 1, 1)).astype(np.float32)
    x = rng.standard_normal((2, 19, *hw)).astype(np.float32)
    a = relay.Var("a", relay.TensorType(x.shape, "float32"))
    wp = relay.const(pack_pointwise_weights(w, 1, nr))
    func = relay.Function([a], conv2d_pointwise_transposed(a, wp, channels=channels, panel_height=kernel.mr))
    lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    source = "".join(lib.c_sources.values())
    assert f"{kernel.prepacked_symbol}(" in source and "ts_transpose_float32(" in source
    require_level(LEVELS[target])
    want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)


def test_the_op_runs_without_the_microkernel_too():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((18, 5, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, 5, 3, 3)).astype(np.float32)
    a = relay.Var("a", relay.TensorType(x.shape, "float32"))
    func = relay.Function([a], conv2d_pointwise_transposed(a, relay.const(pack_pointwise_weights(w, 1, 32)),
                                                           channels=18, panel_height=12))
    lib = tessera.build(relay.IRModule.from_expr(func), target="c -mcpu=x86-64")
    source = "".join(lib.c_sources.values())
    assert "ts_sgemm_" not in source and "ts_transpose_float32" not in source
    require_level("x86-64")
    want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)


def test_the_packed_weight_must_fit_the_channels():
    x = relay.Var("x", relay.TensorType((1, 16, 4, 4), "float32"))
    wp = relay.const(np.zeros((1, 2, 16, 32), np.float32))
    with pytest.raises(TypeInferenceError, match="70 output channels do not fill 2 micro-panels of 32"):
        infer_function(relay.Function([x], conv2d_pointwise_transposed(x, wp, channels=70, panel_height=12)))
    with pytest.raises(TypeInferenceError, match="needs NCHW data and a packed weight"):
        infer_function(relay.Function([x], conv2d_pointwise_transposed(
            x, relay.const(np.zeros((1, 2, 8, 32), np.float32)), channels=64, panel_height=12)))


@pytest.mark.parametrize("target", list(LEVELS))
def test_the_plan_takes_the_cheaper_product(target):
    t = Target(target)
    lanes = float32_lanes(t)
    assert lanes is not None
    nr = 2 * lanes
    tiny = prepacked_pointwise_plan(t, _geometry(256, 256, (3, 3)))  # 9 positions in a 2-lane-wide panel
    assert tiny is not None and tiny.transposed and tiny.kernel.nr == nr
    wide = prepacked_pointwise_plan(t, _geometry(16, 96, (56, 56)))  # a large map: no transposing pass
    assert wide is not None and not wide.transposed
    deep = prepacked_pointwise_plan(t, _geometry(1024, 128, (14, 14)))  # past the other product's depth
    assert deep is not None and deep.transposed
    for g in (_geometry(64, 128, (10, 10)), _geometry(16, 96, (56, 56)), _geometry(64, 64, (25, 5))):
        rows, transposed = prepacked_pointwise_kernel(t, g), transposed_pointwise_kernel(t, g)
        assert rows is not None and transposed is not None  # both run: the cheaper one is picked
        costs = {False: product_cost(g, PackedPointwise(rows, False)),
                 True: product_cost(g, PackedPointwise(transposed, True))}
        plan = prepacked_pointwise_plan(t, g)
        assert plan is not None and costs[plan.transposed] == min(costs.values())


@pytest.mark.parametrize("target", list(LEVELS))
def test_the_plan_leaves_what_neither_product_runs_well(target):
    t = Target(target)
    nr = 2 * (float32_lanes(t) or 0)
    # few channels against the panel width, and the other product not allowed (positions, depth)
    assert prepacked_pointwise_plan(t, _geometry(16, nr // 2 + 1, (3, 3))) is None
    assert prepacked_pointwise_plan(t, _geometry(512, nr + nr // 2, (7, 7))) is None
    # several groups: no transposed product; the other one from PREPACKED_MIN_POSITIONS positions only
    assert prepacked_pointwise_plan(t, _geometry(64, 64, (7, 7), groups=2)) is None
    grouped = prepacked_pointwise_plan(t, _geometry(64, 64, (PREPACKED_MIN_POSITIONS, 1), groups=2))
    assert grouped is not None and not grouped.transposed
    assert prepacked_pointwise_plan(Target("c -mcpu=x86-64"), _geometry(256, 256, (3, 3))) is None


@pytest.mark.parametrize("target", list(LEVELS))
def test_maps_just_below_128_positions_use_the_packed_channel_rows(target):
    """KWS's 64 -> 64 convolutions over 25x5 positions: the channels-as-rows product on the packed weight."""
    x = relay.Var("x", relay.TensorType((1, 64, 25, 5), "float32"))
    w = relay.const(np.ones((64, 64, 1, 1), np.float32))
    func = relay.Function([x], conv.conv2d(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)))
    assert [c for c in iter_calls(pack_gemm_weights(infer_function(func), Target(target)))
            if c.op is conv2d_pointwise_prepacked]
    model = pointwise_model(64, 64, (25, 5), batch=1)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target=target)
    assert "_prepacked_a(" in "".join(lib.c_sources.values())
    require_level(LEVELS[target])
    x = np.random.default_rng(4).standard_normal((1, 64, 25, 5)).astype(np.float32)
    np.testing.assert_allclose(lib(x)[0], ort_session(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
