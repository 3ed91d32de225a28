"""FoldChannelGate (transform/fold_channel_gate.py): conv2d(x * g, W) -> conv2d(x, W * g) for a run-time
per-channel gate g, where it is exact and saves the multiply over the map; PackGemmWeights then packs W and
scales it in the packed layout. End to end on an EfficientNet squeeze-and-excitation block against
onnxruntime, for x86-64-v3 and -v4."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.frontend import from_onnx
from tessera.op import elemwise
from tessera.op import transform as tf
from tessera.op.nn import conv
from tessera.op.nn.conv_prepacked import conv2d_pointwise_prepacked, conv2d_pointwise_transposed
from tessera.relay.expr import Call, Constant
from tessera.relay.visitor import iter_calls
from tessera.target import Target
from tessera.testing.isa import require_level
from tessera.testing.models import ort_session
from tessera.testing.tail_blocks import efficientnet_se_block
from tessera.transform.fold_channel_gate import fold_channel_gates
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


def _folded(func) -> bool:
    """Whether the convolution reads x directly, its weight a run-time product."""
    (call,) = [c for c in iter_calls(func) if c.op is conv.conv2d]
    return isinstance(call.args[1], Call) and call.args[1].op is elemwise.multiply and \
        not (isinstance(call.args[0], Call) and call.args[0].op is elemwise.multiply)


@pytest.mark.parametrize("kernel, padding", [((1, 1), (0, 0, 0, 0)), ((3, 3), (1, 1, 1, 1))])
def test_a_gated_input_folds_into_the_weight_exactly(kernel, padding):
    func = _gated_conv((1, 16, 7, 6), kernel=kernel, padding=padding)
    folded = fold_channel_gates(func)
    assert _folded(folded)
    x = RNG.standard_normal((1, 16, 7, 6)).astype(np.float32)
    s = RNG.standard_normal((1, 16, 1, 1)).astype(np.float32)
    want = tessera.build(relay.IRModule.from_expr(func), target="c")(x, s)[0]
    got = tessera.build(relay.IRModule.from_expr(folded), target="c")(x, s)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_gate_of_rank_three_folds_too():
    assert _folded(fold_channel_gates(_gated_conv((1, 16, 5, 5), gate_shape=(16, 1, 1))))


@pytest.mark.parametrize("case", [
    dict(x_shape=(2, 16, 5, 5), gate_shape=(2, 16, 1, 1)),  # a gate per image: one weight per image
    dict(x_shape=(1, 16, 5, 5), groups=2),
    dict(x_shape=(1, 16, 5, 5), gate_shape=(1, 1, 5, 5)),  # not per channel
    dict(x_shape=(1, 16, 5, 5), extra_user=True),  # the product is read elsewhere: nothing saved
    dict(x_shape=(1, 16, 5, 5), constant_gate=True),  # SimplifyInference's business
])
def test_what_does_not_fold(case):
    func = _gated_conv(**case)
    assert not _folded(fold_channel_gates(func))


@pytest.mark.parametrize("target", list(LEVELS))
@pytest.mark.parametrize("size", [3, 20])  # 9 positions: the transposed product; 400: channels as rows
def test_the_gated_weight_is_packed_then_scaled(target, size):
    original = _gated_conv((1, 32, size, size))
    func = fold_channel_gates(original)
    packed = pack_gemm_weights(func, Target(target))
    (call,) = [c for c in iter_calls(packed) if c.op in (conv2d_pointwise_prepacked, conv2d_pointwise_transposed)]
    assert (call.op is conv2d_pointwise_transposed) == (size == 3)
    scaled = call.args[1]
    assert isinstance(scaled, Call) and scaled.op is elemwise.multiply and isinstance(scaled.args[0], Constant)
    row = scaled.args[1]
    assert isinstance(row, Call) and row.op is tf.reshape and tuple(row.checked_type_.shape) == (1, 1, 32, 1)
    require_level(LEVELS[target])
    x = RNG.standard_normal((1, 32, size, size)).astype(np.float32)
    s = RNG.standard_normal((1, 32, 1, 1)).astype(np.float32)
    want = tessera.build(relay.IRModule.from_expr(original), target="c -mcpu=x86-64")
    lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    np.testing.assert_allclose(lib(x, s)[0], want(x, s)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", list(LEVELS))
def test_a_squeeze_excitation_block_matches_onnxruntime(target):
    model = efficientnet_se_block(size=12)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target=target)
    kernels = tessera.GraphModule(lib).kernel_operators()
    # unfolded, the gate's convolution multiplied the whole map in its epilogue (..., sigmoid, multiply)
    assert kernels and not any("sigmoid" in ops and "multiply" in ops for ops in kernels)
    assert any(ops[0] == "nn.conv2d_pointwise_prepacked" and "multiply" not in ops for ops in kernels)
    require_level(LEVELS[target])
    x = RNG.standard_normal((1, 16, 12, 12)).astype(np.float32)
    want = ort_session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)
