"""A DeepLabV3-style ASPP head as an ONNX model with seeded random weights (built here, no download).

Atrous spatial pyramid pooling on a 1 x 256 x 14 x 14 feature map: a 1x1 branch, three 3x3
branches of dilation 12, 24 and 36 (padding = dilation, so most of their taps read padding), and an
image-pooling branch (global average pool, 1x1, broadcast back), concatenated, projected by a 1x1,
then a 3x3 and a 1x1 classifier, as torchvision's DeepLabHead. Batch norms are folded into the
convolutions' biases; every convolution but the classifier is followed by a ReLU.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ASPP_NAME = "aspp_head"
CHANNELS = 256
SIZE = 14
DILATIONS = (12, 24, 36)
CLASSES = 21
INPUT_SHAPE = (1, CHANNELS, SIZE, SIZE)


def aspp_head(seed: int = 0, channels: int = CHANNELS, size: int = SIZE,
              dilations: tuple[int, ...] = DILATIONS) -> onnx.ModelProto:
    """The ASPP head; input "x" of shape (1, channels, size, size), output "y" of (1, CLASSES, size, size)."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def conv(src: str, out: str, c_in: int, c_out: int, k: int, dilation: int = 1, relu: bool = True) -> str:
        # He-scaled weights keep the activations' variance steady through the ReLUs
        w = rng.standard_normal((c_out, c_in, k, k)).astype(np.float32) * np.float32(np.sqrt(2.0 / (c_in * k * k)))
        b = (0.01 * rng.standard_normal(c_out)).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{out}_w"), numpy_helper.from_array(b, f"{out}_b")])
        pad = dilation * (k // 2)
        target = f"{out}_conv" if relu else out
        nodes.append(helper.make_node("Conv", [src, f"{out}_w", f"{out}_b"], [target], kernel_shape=[k, k],
                                      dilations=[dilation, dilation], pads=[pad] * 4))
        if relu:
            nodes.append(helper.make_node("Relu", [target], [out]))
        return out

    branches = [conv("x", "b0", channels, channels, 1)]
    branches += [conv("x", f"b{i + 1}", channels, channels, 3, d) for i, d in enumerate(dilations)]
    nodes.append(helper.make_node("GlobalAveragePool", ["x"], ["pooled"]))
    conv("pooled", "pool_1x1", channels, channels, 1)
    inits.append(numpy_helper.from_array(np.array([1, channels, size, size], np.int64), "pool_shape"))
    nodes.append(helper.make_node("Expand", ["pool_1x1", "pool_shape"], ["pool_up"]))
    branches.append("pool_up")
    nodes.append(helper.make_node("Concat", branches, ["cat"], axis=1))
    conv("cat", "project", channels * len(branches), channels, 1)
    conv("project", "head", channels, channels, 3)
    conv("head", "y", channels, CLASSES, 1, relu=False)
    graph = helper.make_graph(nodes, ASPP_NAME,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CLASSES, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
