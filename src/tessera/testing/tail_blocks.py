"""Small ONNX blocks whose convolutions and matrix products end in elementwise tails.

Built with onnx.helper and seeded random weights, in the forms the exporters
write them (decomposed SiLU and GELU), for the latency benchmark and the
tests of fused epilogues:

* `mobilenet_v2_block`: inverted residual, 1x1 expand -> Clip(0, 6) -> 3x3
  depthwise -> Clip(0, 6) -> 1x1 project, plus the skip connection;
* `mobilenet_v3_block`: the same with HardSwish;
* `efficientnet_block`: the same with SiLU as x * Sigmoid(x);
* `efficientnet_se_block`: that with squeeze-and-excitation (not benchmarked);
* `gpt2_mlp`: a GPT-2 MLP, MatMul + bias -> tanh-GELU written out with Pow
  and Tanh -> MatMul + bias, plus the residual.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
Activation = Callable[[str, str], list[onnx.NodeProto]]  # (input, output) -> nodes


def _weight(name: str, shape: tuple[int, ...], rng: np.random.Generator, scale: float) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _scalar(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.float32), name)


def _relu6(x: str, y: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Clip", [x, "zero", "six"], [y])]


def _hard_swish(x: str, y: str) -> list[onnx.NodeProto]:
    return [helper.make_node("HardSwish", [x], [y])]


def _silu(x: str, y: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Sigmoid", [x], [f"{y}_sigmoid"]), helper.make_node("Mul", [x, f"{y}_sigmoid"], [y])]


def _inverted_residual(name: str, activation: Activation, channels: int, expand: int, size: int,
                       seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    wide = channels * expand
    inits = [
        _weight("w_expand", (wide, channels, 1, 1), rng, 1 / math.sqrt(channels)),
        _weight("b_expand", (wide,), rng, 0.1),
        _weight("w_depthwise", (wide, 1, 3, 3), rng, 1 / 3), _weight("b_depthwise", (wide,), rng, 0.1),
        _weight("w_project", (channels, wide, 1, 1), rng, 1 / math.sqrt(wide)),
        _weight("b_project", (channels,), rng, 0.1),
        _scalar("zero", 0.0), _scalar("six", 6.0),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_expand", "b_expand"], ["expanded"]),
        *activation("expanded", "expanded_act"),
        helper.make_node("Conv", ["expanded_act", "w_depthwise", "b_depthwise"], ["depthwise"], group=wide,
                         pads=[1, 1, 1, 1]),
        *activation("depthwise", "depthwise_act"),
        helper.make_node("Conv", ["depthwise_act", "w_project", "b_project"], ["projected"]),
        helper.make_node("Add", ["projected", "x"], ["y"]),
    ]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def mobilenet_v2_block(channels: int = 16, expand: int = 6, size: int = 56, seed: int = 0) -> onnx.ModelProto:
    return _inverted_residual("mobilenet_v2_block", _relu6, channels, expand, size, seed)


def mobilenet_v3_block(channels: int = 16, expand: int = 6, size: int = 56, seed: int = 0) -> onnx.ModelProto:
    return _inverted_residual("mobilenet_v3_block", _hard_swish, channels, expand, size, seed)


def efficientnet_block(channels: int = 16, expand: int = 6, size: int = 56, seed: int = 0) -> onnx.ModelProto:
    return _inverted_residual("efficientnet_block", _silu, channels, expand, size, seed)


def efficientnet_se_block(channels: int = 16, expand: int = 6, size: int = 56, squeeze: int = 4,
                          seed: int = 0) -> onnx.ModelProto:
    """`efficientnet_block` with squeeze-and-excitation before the projection, as EfficientNet's MBConv: the
    SiLU'd depthwise output times sigmoid(conv(silu(conv(GlobalAveragePool(it))))), one gate per channel.
    (Not in BLOCKS, so not benchmarked.)"""
    rng = np.random.default_rng(seed)
    wide = channels * expand
    inits = [
        _weight("w_expand", (wide, channels, 1, 1), rng, 1 / math.sqrt(channels)),
        _weight("b_expand", (wide,), rng, 0.1),
        _weight("w_depthwise", (wide, 1, 3, 3), rng, 1 / 3), _weight("b_depthwise", (wide,), rng, 0.1),
        _weight("w_reduce", (squeeze, wide, 1, 1), rng, 1 / math.sqrt(wide)), _weight("b_reduce", (squeeze,), rng, 0.1),
        _weight("w_gate", (wide, squeeze, 1, 1), rng, 1 / math.sqrt(squeeze)), _weight("b_gate", (wide,), rng, 0.1),
        _weight("w_project", (channels, wide, 1, 1), rng, 1 / math.sqrt(wide)),
        _weight("b_project", (channels,), rng, 0.1),
    ]
    mm = helper.make_node
    nodes = [
        mm("Conv", ["x", "w_expand", "b_expand"], ["expanded"]), *_silu("expanded", "expanded_act"),
        mm("Conv", ["expanded_act", "w_depthwise", "b_depthwise"], ["depthwise"], group=wide, pads=[1, 1, 1, 1]),
        *_silu("depthwise", "depthwise_act"),
        mm("GlobalAveragePool", ["depthwise_act"], ["pooled"]),
        mm("Conv", ["pooled", "w_reduce", "b_reduce"], ["reduced"]), *_silu("reduced", "reduced_act"),
        mm("Conv", ["reduced_act", "w_gate", "b_gate"], ["gate_in"]), mm("Sigmoid", ["gate_in"], ["gate"]),
        mm("Mul", ["depthwise_act", "gate"], ["excited"]),
        mm("Conv", ["excited", "w_project", "b_project"], ["projected"]),
        mm("Add", ["projected", "x"], ["y"]),
    ]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "efficientnet_se_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def gpt2_mlp(tokens: int = 64, width: int = 256, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [
        _weight("w_fc", (width, 4 * width), rng, 1 / math.sqrt(width)), _weight("b_fc", (4 * width,), rng, 0.1),
        _weight("w_proj", (4 * width, width), rng, 1 / math.sqrt(4 * width)), _weight("b_proj", (width,), rng, 0.1),
        _scalar("three", 3.0), _scalar("cubic", 0.044715), _scalar("sqrt_2_over_pi", math.sqrt(2 / math.pi)),
        _scalar("one", 1.0), _scalar("half", 0.5),
    ]
    mm = helper.make_node
    nodes = [
        mm("MatMul", ["x", "w_fc"], ["fc"]), mm("Add", ["fc", "b_fc"], ["h"]),
        # 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3))), as transformers' GPT-2 exports it
        mm("Pow", ["h", "three"], ["cube"]), mm("Mul", ["cubic", "cube"], ["scaled_cube"]),
        mm("Add", ["h", "scaled_cube"], ["inner"]), mm("Mul", ["sqrt_2_over_pi", "inner"], ["tanh_in"]),
        mm("Tanh", ["tanh_in"], ["t"]), mm("Add", ["one", "t"], ["one_plus"]),
        mm("Mul", ["half", "h"], ["half_h"]), mm("Mul", ["half_h", "one_plus"], ["gelu"]),
        mm("MatMul", ["gelu", "w_proj"], ["proj"]), mm("Add", ["proj", "b_proj"], ["out"]),
        mm("Add", ["out", "x"], ["y"]),
    ]
    shape = [1, tokens, width]
    graph = helper.make_graph(nodes, "gpt2_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


BLOCKS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_v2_block": mobilenet_v2_block,
    "mobilenet_v3_block": mobilenet_v3_block,
    "efficientnet_block": efficientnet_block,
    "gpt2_mlp": gpt2_mlp,
}
