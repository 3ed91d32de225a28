"""Pointwise convolutions whose constant weights are packed at compile time: the PackGemmWeights pass
(transform/pack_gemm_weights.py), `nn.conv2d_pointwise_prepacked` (op/nn/conv_prepacked.py) and the
`ts_sgemm_<MR>x<NR>_prepacked_a` entry its kernel calls, built for AVX2 and AVX-512 against onnxruntime."""

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
from tessera.op.nn.conv_gemm import pack_pointwise_weights, unpack_pointwise_weights
from tessera.op.nn.conv_prepacked import conv2d_pointwise_prepacked
from tessera.op.nn.gemm import pack_a_panels
from tessera.relay.visitor import iter_calls
from tessera.target import Target
from tessera.target.simd import float32_lanes
from tessera.testing.models import ort_session
from tessera.transform.infer_type import infer_function
from tessera.transform.pack_gemm_weights import pack_gemm_weights
from tessera.testing.isa import require_level

LEVELS = {"c -mcpu=x86-64-v3": "x86-64-v3", "c -mcpu=x86-64-v4": "x86-64-v4"}
# (in channels, out channels, groups, map): ragged against every MR (21 per group), several groups (8
# output channels each), a ragged map, a map past LARGE_MAP
SHAPES = [(48, 42, 2, (12, 12)), (24, 40, 1, (13, 11)), (64, 32, 4, (16, 16)), (96, 24, 1, (34, 32))]


def pointwise_model(c: int, oc: int, groups: int, hw: tuple[int, int], batch: int) -> onnx.ModelProto:
    """A 1x1 Conv with bias, then Relu: the epilogue runs in the GEMM call (te/gemm_epilogue.py)."""
    rng = np.random.default_rng(c + oc + groups)
    w = rng.standard_normal((oc, c // groups, 1, 1)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1], group=groups)
    graph = helper.make_graph(
        [node, helper.make_node("Relu", ["y"], ["z"])], "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, *hw])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", list(LEVELS))
@pytest.mark.parametrize("c, oc, groups, hw", SHAPES)
def test_pointwise_convs_with_packed_weights_match_onnxruntime(c, oc, groups, hw, target):
    model = pointwise_model(c, oc, groups, hw, batch=2)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target=target)
    source = "".join(calling_units(lib.c_sources).values())
    calls = re.findall(r"(?<!static void )ts_sgemm_\d+x\d+_prepacked_a_fused\(", source)
    assert calls, "the convolution runs on its compile-time packed weight, bias and ReLU inside the call"
    assert re.search(r"ts_sgemm_\d+x\d+\(", source) is None  # no entry packing the weight at run time
    require_level(LEVELS[target])
    x = np.random.default_rng(1).standard_normal((2, c, *hw)).astype(np.float32)
    want = ort_session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", list(LEVELS))
def test_the_pass_packs_each_groups_weights_as_a_panels(target):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((42, 24, 1, 1)).astype(np.float32)
    x = relay.Var("x", relay.TensorType((2, 48, 12, 12), "float32"))
    func = relay.Function([x], conv.conv2d(x, relay.const(w), strides=(1, 1), padding=(0, 0, 0, 0),
                                           dilation=(1, 1), groups=2))
    packed = pack_gemm_weights(infer_function(func), Target(target))
    (call,) = [c for c in iter_calls(packed) if c.op is conv2d_pointwise_prepacked]
    wp = call.args[1].data
    mr = wp.shape[-1]
    assert call.attrs.panel_width == 2 * float32_lanes(Target(target))  # the default kernels' NR
    assert wp.shape == (2, -(-21 // mr), 24, mr) and call.attrs.channels == 42
    for g in range(2):  # what the microkernel's `_pack_a` builds at run time (tests/op/test_gemm.py)
        np.testing.assert_array_equal(wp[g], pack_a_panels(w[21 * g:21 * (g + 1), :, 0, 0], mr))
    np.testing.assert_array_equal(unpack_pointwise_weights(wp, 42), w)
    assert call.checked_type_ == relay.TensorType((2, 42, 12, 12), "float32")


@pytest.mark.parametrize("target", ["c -mcpu=x86-64", "c -mcpu=cortex-m7", "c -mcpu=x86-64-v3"])
def test_convolutions_the_microkernel_does_not_run_keep_their_weight(target):
    x = relay.Var("x", relay.TensorType((1, 16, 12, 12), "float32"))
    w1 = relay.const(np.ones((32, 16, 1, 1), np.float32))
    w3 = relay.const(np.ones((32, 16, 3, 3), np.float32))
    convs = (conv.conv2d(x, w3, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)),  # 3x3
             conv.conv2d(x, w1, strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1)),  # strided
             conv.conv2d(x, relay.const(np.ones((4, 16, 1, 1), np.float32)), strides=(1, 1),
                         padding=(0, 0, 0, 0), dilation=(1, 1)))  # fewer output channels than MIN_ROWS
    packed = pack_gemm_weights(infer_function(relay.Function([x], relay.Tuple(convs))), Target(target))
    assert not [c for c in iter_calls(packed) if c.op is conv2d_pointwise_prepacked]
    if target.endswith("v3"):  # the same input through a 1x1 stride-1 weight is packed
        func = relay.Function([x], conv.conv2d(x, w1, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)))
        packed = pack_gemm_weights(infer_function(func), Target(target))
        assert [c for c in iter_calls(packed) if c.op is conv2d_pointwise_prepacked]


@pytest.mark.parametrize("target", ["c -mcpu=x86-64", "c -mcpu=x86-64-v3"])
def test_the_op_runs_without_the_microkernel_too(target):
    """Built by hand for a target without that microkernel, the op reads the weight through its panels."""
    require_level(LEVELS.get(target, "x86-64"))
    rng = np.random.default_rng(3)
    w = rng.standard_normal((18, 5, 1, 1)).astype(np.float32)
    x = rng.standard_normal((2, 15, 4, 3)).astype(np.float32)
    a = relay.Var("a", relay.TensorType(x.shape, "float32"))
    wp = pack_pointwise_weights(w, 3, 4)  # MR 4 with NR 32: no such kernel on either target
    func = relay.Function([a], conv2d_pointwise_prepacked(a, relay.const(wp), channels=18, panel_width=32))
    lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    assert "ts_sgemm_" not in "".join(lib.c_sources.values())
    want = np.einsum("ngchw,goc->ngohw", x.reshape(2, 3, 5, 4, 3).astype(np.float64),
                     w[:, :, 0, 0].reshape(3, 6, 5)).reshape(2, 18, 4, 3)
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)


def test_channels_must_fill_the_panels():
    x = relay.Var("x", relay.TensorType((1, 16, 4, 4), "float32"))
    wp = relay.const(np.zeros((2, 2, 8, 8), np.float32))
    with pytest.raises(TypeInferenceError, match="17 output channels per group do not fill 2 micro-panels of 8"):
        infer_function(relay.Function([x], conv2d_pointwise_prepacked(x, wp, channels=34, panel_width=32)))
    with pytest.raises(TypeInferenceError, match="do not fit 2 groups"):
        infer_function(relay.Function([x], conv2d_pointwise_prepacked(
            x, relay.const(np.zeros((2, 2, 7, 8), np.float32)), channels=32, panel_width=32)))
