"""A ConvNeXt-T stage block as an ONNX model with seeded random weights (built here, no download).

The block in the form torchvision's ConvNeXt exports it: a 7x7 depthwise convolution (padding 3) in
NCHW, a Transpose to NHWC, LayerNormalization over the channels (the last axis, epsilon 1e-6), a
1x1 expansion to 4x the channels written as MatMul + Add (a Linear on the NHWC map), exact GELU
written out with Erf, the 1x1 projection back (MatMul + Add), a Transpose to NCHW, the layer scale
(a Mul by a per-channel vector) and the residual Add. Stage 1 of ConvNeXt-T: 96 channels at 56x56.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CONVNEXT_NAME = "convnext_block"
CHANNELS = 96
SIZE = 56
INPUT_SHAPE = (1, CHANNELS, SIZE, SIZE)


def convnext_block(seed: int = 0, channels: int = CHANNELS, size: int = SIZE) -> onnx.ModelProto:
    """The block; input "x" and output "y" of shape (1, channels, size, size)."""
    rng = np.random.default_rng(seed)
    wide = 4 * channels

    def weight(name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def scalar(name: str, value: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, np.float32), name)

    inits = [
        weight("w_dw", (channels, 1, 7, 7), 1 / 7), weight("b_dw", (channels,), 0.1),
        # LayerNorm's affine parameters near their trained values (scale ~1, shift ~0), not exactly 1 and 0
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32), "ln_scale"),
        weight("ln_bias", (channels,), 0.1),
        weight("w_expand", (channels, wide), 1 / math.sqrt(channels)), weight("b_expand", (wide,), 0.1),
        weight("w_project", (wide, channels), 1 / math.sqrt(wide)), weight("b_project", (channels,), 0.1),
        # the layer scale starts at 1e-6 in training and grows; 0.1-ish keeps the branch visible in the output
        weight("layer_scale", (channels, 1, 1), 0.1),
        scalar("sqrt2", math.sqrt(2.0)), scalar("one", 1.0), scalar("half", 0.5),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w_dw", "b_dw"], ["dw"], group=channels, kernel_shape=[7, 7], pads=[3, 3, 3, 3]),
        n("Transpose", ["dw"], ["nhwc"], perm=[0, 2, 3, 1]),
        n("LayerNormalization", ["nhwc", "ln_scale", "ln_bias"], ["normed"], axis=-1, epsilon=1e-6),
        n("MatMul", ["normed", "w_expand"], ["expand_mm"]), n("Add", ["expand_mm", "b_expand"], ["expanded"]),
        # exact GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2)))
        n("Div", ["expanded", "sqrt2"], ["scaled"]), n("Erf", ["scaled"], ["erf"]),
        n("Add", ["erf", "one"], ["erf_1"]), n("Mul", ["expanded", "erf_1"], ["gelu_2"]),
        n("Mul", ["gelu_2", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w_project"], ["project_mm"]), n("Add", ["project_mm", "b_project"], ["projected"]),
        n("Transpose", ["projected"], ["nchw"], perm=[0, 3, 1, 2]),
        n("Mul", ["layer_scale", "nchw"], ["scaled_branch"]),
        n("Add", ["x", "scaled_branch"], ["y"]),
    ]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, CONVNEXT_NAME, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
