"""Squeeze-and-excitation gates folded into packed pointwise weights (transform/channel_gate.py, used by
PackGemmWeights): conv2d(x * g, W) -> conv2d(x, W * g) for a run-time per-channel gate g, W packed at compile
time and scaled in its packed layout, where it is exact and saves the multiply over the map. End to end on an
EfficientNet squeeze-and-excitation block against onnxruntime, for x86-64-v3 and -v4."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.frontend import from_onnx
from tessera.op import elemwise
from tessera.op import transform as tf
from tessera.op.nn import conv
from tessera.op.nn.conv_blocked import conv2d_blocked
from tessera.op.nn.conv_prepacked import conv2d_pointwise_prepacked, conv2d_pointwise_transposed
from tessera.relay.expr import Call, Constant
from tessera.relay.visitor import iter_calls
from tessera.target import Target
from tessera.testing.isa import require_level
from tessera.testing.models import ort_session
from tessera.testing.tail_blocks import efficientnet_se_block
from tessera.transform.infer_type import infer_function
from tessera.transform.pack_gemm_weights import pack_gemm_weights

LEVELS = {"c -mcpu=x86-64-v3": "x86-64-v3", "c -mcpu=x86-64-v4": "x86-64-v4"}
RNG = np.random.default_rng(5)


def _gated_conv(x_shape, gate_shape=None, groups=1, kernel=(1, 1), padding=(0, 0, 0, 0), extra_user=False,
                constant_gate=False):
    """conv2d(x * g, W) with g = sigmoid(s) from a parameter s of `gate_shape` (default (1, C, 1, 1))."""
    c = x_shape[1]
    x = relay.Var("x", relay.TensorType(x_shape, "float32"))
    s = relay.Var("s", relay.TensorType(gate_shape or (1, c, 1, 1), "float32"))
    gate = relay.const(RNG.standard_normal(gate_shape or (1, c, 1, 1)).astype(np.float32)) if constant_gate \
        else elemwise.sigmoid(s)
    product = elemwise.multiply(x, gate)
    w = relay.const(RNG.standard_normal((32, c // groups, *kernel)).astype(np.float32))
    y = conv.conv2d(product, w, strides=(1, 1), padding=padding, dilation=(1, 1), groups=groups)
    body = relay.Tuple((y, product)) if extra_user else y
    return infer_function(relay.Function([x, s], body))


def _packed_conv(func, target: str = "c -mcpu=x86-64-v4") -> Call | None:
    calls = [c for c in iter_calls(pack_gemm_weights(func, Target(target)))
             if c.op in (conv2d_pointwise_prepacked, conv2d_pointwise_transposed)]
    return calls[0] if calls else None


def _folded(func) -> bool:
    """Whether the packed convolution reads x directly, its weight the packed panels times the gate."""
    call = _packed_conv(func)
    assert call is not None, "the weight is packed"
    return isinstance(call.args[1], Call) and call.args[1].op is elemwise.multiply and \
        not (isinstance(call.args[0], Call) and call.args[0].op is elemwise.multiply)


def test_a_gated_input_folds_into_the_packed_weight_exactly():
    func = _gated_conv((1, 16, 7, 6))
    assert _folded(func)
    x = RNG.standard_normal((1, 16, 7, 6)).astype(np.float32)
    s = RNG.standard_normal((1, 16, 1, 1)).astype(np.float32)
    want = tessera.build(relay.IRModule.from_expr(func), target="c -mcpu=x86-64")(x, s)[0]  # nothing packed
    require_level("x86-64-v4")
    got = tessera.build(relay.IRModule.from_expr(func), target="c -mcpu=x86-64-v4")(x, s)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_gate_of_rank_three_folds_too():
    assert _folded(_gated_conv((1, 16, 5, 5), gate_shape=(16, 1, 1)))


@pytest.mark.parametrize("case", [
    dict(x_shape=(2, 16, 5, 5), gate_shape=(2, 16, 1, 1)),  # a gate per image: one weight per image
    dict(x_shape=(1, 16, 5, 5), gate_shape=(1, 1, 5, 5)),  # not per channel
    dict(x_shape=(1, 16, 5, 5), extra_user=True),  # the product is read elsewhere: nothing saved
    dict(x_shape=(1, 16, 5, 5), constant_gate=True),  # SimplifyInference's business
])
def test_what_does_not_fold(case):
    assert not _folded(_gated_conv(**case))


def test_several_groups_or_a_3x3_kernel_keep_the_multiply():
    for func in (_gated_conv((1, 16, 12, 12), groups=2),
                 _gated_conv((1, 16, 5, 5), kernel=(3, 3), padding=(1, 1, 1, 1))):
        call = _packed_conv(func)
        if call is not None:  # (the grouped one packs, reading the product)
            assert isinstance(call.args[1], Constant)
        (conv_call,) = [c for c in iter_calls(pack_gemm_weights(func, Target("c -mcpu=x86-64-v4")))
                        if c.op in (conv.conv2d, conv2d_pointwise_prepacked, conv2d_blocked)]
        assert isinstance(conv_call.args[0], Call) and conv_call.args[0].op is elemwise.multiply


@pytest.mark.parametrize("target", list(LEVELS))
@pytest.mark.parametrize("size", [3, 20])  # 9 positions: the transposed product; 400: channels as rows
def test_the_gated_weight_is_packed_then_scaled(target, size):
    func = _gated_conv((1, 32, size, size))
    call = _packed_conv(func, target)
    assert call is not None
    assert (call.op is conv2d_pointwise_transposed) == (size == 3)
    scaled = call.args[1]
    assert isinstance(scaled, Call) and scaled.op is elemwise.multiply and isinstance(scaled.args[0], Constant)
    row = scaled.args[1]
    assert isinstance(row, Call) and row.op is tf.reshape and tuple(row.checked_type_.shape) == (1, 1, 32, 1)
    require_level(LEVELS[target])
    x = RNG.standard_normal((1, 32, size, size)).astype(np.float32)
    s = RNG.standard_normal((1, 32, 1, 1)).astype(np.float32)
    want = tessera.build(relay.IRModule.from_expr(func), target="c -mcpu=x86-64")
    lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    np.testing.assert_allclose(lib(x, s)[0], want(x, s)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", list(LEVELS))
def test_a_squeeze_excitation_block_matches_onnxruntime(target):
    model = efficientnet_se_block(size=12)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target=target)
    # read from the graph, not a GraphModule: loading x86-64-v4 code on an AVX2-only CPU is refused
    graph = json.loads(lib.graph_json)
    kernels = [tuple(n.get("ops", ())) for n in graph["nodes"] if n["op"] == "kernel"]
    # unfolded, the gate's kernel multiplied the whole 96 x 12 x 12 map; folded, it scales the packed weight
    multiplied = [graph["entries"][graph["node_row_ptr"][i]]["shape"] for i, n in enumerate(graph["nodes"])
                  if "multiply" in n.get("ops", ())]
    # the packed 16 x 96 weight: (groups, panels, 96 inputs, MR), its 16 rows padded to whole micro-panels
    assert multiplied and all(len(shape) == 4 and shape[2] == 96
                              and (shape[1] - 1) * shape[3] < 16 <= shape[1] * shape[3] for shape in multiplied)
    assert any(ops[0] == "nn.conv2d_pointwise_prepacked" and "multiply" not in ops for ops in kernels)
    require_level(LEVELS[target])
    x = RNG.standard_normal((1, 16, 12, 12)).astype(np.float32)
    want = ort_session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)
