"""Matmul-bound transformer blocks for the latency benchmark, built with onnx.helper and random weights.

`vit_block`: one ViT-B/16 encoder layer (pre-norm) at 197 tokens x 768 hidden,
12 heads of 64, MLP 3072 with exact (erf) GELU. `bert_block`: the same layer
post-norm (BERT-base) at 128 tokens. Each is LayerNormalization, MatMul + Add
projections, Q·Kᵀ per head (a MatMul against a Transpose), Softmax, and the
MLP: about 90% of the arithmetic is in the matrix products.

    python benchmarks/encoder_block.py vit_block   # saves vit_block.onnx
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, MLP = 768, 12, 3072
BLOCKS = {"vit_block": (197, True), "bert_block": (128, False)}  # tokens, pre-norm


def _weights(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def build(name: str, seed: int = 0) -> onnx.ModelProto:
    """The block `name` (one of BLOCKS) with seeded random weights; input "x" (1, tokens, 768)."""
    tokens, pre_norm = BLOCKS[name]
    rng = np.random.default_rng(seed)
    head = HIDDEN // HEADS
    inits = [
        _weights(rng, "w_qkv", (HIDDEN, 3 * HIDDEN), HIDDEN ** -0.5), _weights(rng, "b_qkv", (3 * HIDDEN,), 0.02),
        _weights(rng, "w_out", (HIDDEN, HIDDEN), HIDDEN ** -0.5), _weights(rng, "b_out", (HIDDEN,), 0.02),
        _weights(rng, "w_fc1", (HIDDEN, MLP), HIDDEN ** -0.5), _weights(rng, "b_fc1", (MLP,), 0.02),
        _weights(rng, "w_fc2", (MLP, HIDDEN), MLP ** -0.5), _weights(rng, "b_fc2", (HIDDEN,), 0.02),
        numpy_helper.from_array(np.ones(HIDDEN, np.float32), "ln_scale"),
        numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "ln_bias"),
        numpy_helper.from_array(np.array([1, tokens, 3, HEADS, head], np.int64), "qkv_shape"),
        numpy_helper.from_array(np.array([1, tokens, HIDDEN], np.int64), "tok_shape"),
        numpy_helper.from_array(np.array(head ** -0.5, np.float32), "scale"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(2 ** -0.5, np.float32), "rsqrt2"),
        numpy_helper.from_array(np.array([0], np.int64), "i0"),
        numpy_helper.from_array(np.array([1], np.int64), "i1"),
        numpy_helper.from_array(np.array([2], np.int64), "i2"),
        numpy_helper.from_array(np.array([3], np.int64), "i3"),
    ]
    n = helper.make_node
    ln = lambda x, y: n("LayerNormalization", [x, "ln_scale", "ln_bias"], [y], axis=-1, epsilon=1e-6)  # noqa: E731
    nodes = [ln("x", "h0")] if pre_norm else [n("Identity", ["x"], ["h0"])]
    nodes += [
        n("MatMul", ["h0", "w_qkv"], ["qkv_mm"]), n("Add", ["qkv_mm", "b_qkv"], ["qkv"]),
        n("Reshape", ["qkv", "qkv_shape"], ["qkv5"]),
        n("Transpose", ["qkv5"], ["qkv_t"], perm=[2, 0, 3, 1, 4]),  # (3, 1, heads, tokens, 64)
        n("Slice", ["qkv_t", "i0", "i1", "i0"], ["q5"]), n("Slice", ["qkv_t", "i1", "i2", "i0"], ["k5"]),
        n("Slice", ["qkv_t", "i2", "i3", "i0"], ["v5"]),
        n("Squeeze", ["q5", "i0"], ["q"]), n("Squeeze", ["k5", "i0"], ["k"]), n("Squeeze", ["v5", "i0"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["scores_mm"]), n("Mul", ["scores_mm", "scale"], ["scores"]),
        n("Softmax", ["scores"], ["probs"], axis=-1),
        n("MatMul", ["probs", "v"], ["ctx"]),  # (1, heads, tokens, 64)
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]), n("Reshape", ["ctx_t", "tok_shape"], ["ctx2"]),
        n("MatMul", ["ctx2", "w_out"], ["out_mm"]), n("Add", ["out_mm", "b_out"], ["attn"]),
        n("Add", ["x", "attn"], ["r1_raw"]),
    ]
    nodes += [ln("r1_raw", "h1"), n("Identity", ["r1_raw"], ["r1"])] if pre_norm else [
        ln("r1_raw", "r1"), n("Identity", ["r1"], ["h1"])]
    nodes += [
        n("MatMul", ["h1", "w_fc1"], ["fc1_mm"]), n("Add", ["fc1_mm", "b_fc1"], ["fc1"]),
        n("Mul", ["fc1", "rsqrt2"], ["g0"]), n("Erf", ["g0"], ["g1"]), n("Add", ["g1", "one"], ["g2"]),
        n("Mul", ["fc1", "half"], ["g3"]), n("Mul", ["g3", "g2"], ["gelu"]),
        n("MatMul", ["gelu", "w_fc2"], ["fc2_mm"]), n("Add", ["fc2_mm", "b_fc2"], ["mlp"]),
        n("Add", ["r1", "mlp"], ["y_raw"]),
    ]
    nodes += [n("Identity", ["y_raw"], ["y"])] if pre_norm else [ln("y_raw", "y")]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def sample_input(name: str, seed: int = 1) -> np.ndarray:
    tokens, _ = BLOCKS[name]
    return np.random.default_rng(seed).standard_normal((1, tokens, HIDDEN)).astype(np.float32)


if __name__ == "__main__":
    for block in sys.argv[1:] or list(BLOCKS):
        onnx.save(build(block), f"{block}.onnx")
        print(f"saved {block}.onnx")
