"""The four MLPerf Tiny v1.0 reference networks as ONNX models with seeded random weights.

Why this exists: MLPerf Tiny (https://github.com/mlcommons/tiny,
``benchmark/training/*``) is the standard benchmark for microcontroller inference,
and its four networks (keyword spotting DS-CNN, CIFAR-10 ResNet-8, visual wake
words MobileNetV1-0.25, ToyADMOS FC autoencoder) are what tessera's embedded
targets are compared on. The trained reference models are TFLite files in NHWC
layout; we want the same *architectures* as small, self-contained ONNX graphs
(NCHW, float32, batch 1, static shapes, opset 13) that can be built offline,
reproducibly, without TensorFlow. Only the architecture matters for latency,
code size and correctness testing, so weights are random but seeded and scaled
so that activations stay in a sane range (logits std ~1, non-uniform softmax):

* Conv / Gemm weights: He-normal, ``N(0, 2 / fan_in)`` (fan_in = C_in/group * kh * kw);
* biases (Keras layers have them by default, even before a batch norm): ``0.01 * N(0, 1)``;
* BatchNormalization is kept as a node (as in the Keras reference; folding it is
  the compiler's job) with ``scale ~ U(0.8, 1.2)``, ``bias ~ 0.1 N``,
  ``mean ~ 0.1 N``, ``var ~ U(0.5, 1.5)`` and Keras' ``epsilon = 1e-3``.

"same" padding follows TensorFlow: when the total padding is odd the extra row /
column goes at the end (bottom / right), so e.g. a stride-2 3x3 conv on 32x32
gets pads ``[0, 0, 1, 1]``. The pads are written explicitly rather than as
``auto_pad`` so that compilers without ``auto_pad`` support run the graphs.

Only these ops are used: Conv, BatchNormalization, Relu, Add, AveragePool,
GlobalAveragePool, Flatten, Gemm, Softmax.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..target.toolchain import cache_dir
from ..util.digest import intact, store_cache_entry
from .models import seeded_input

__all__ = [
    "BUILD_VERSION", "MODELS", "ModelSpec", "ReferenceLatency", "build", "count_macs",
    "count_params", "model_path", "sample_input", "weight_bytes",
]  # fmt: skip

OPSET = 13
IR_VERSION = 8  # onnxruntime 1.31 rejects the IR version onnx 1.23 writes by default
# Bump whenever a builder changes its output, so cached files from older code are not reused.
BUILD_VERSION = 1

BN_EPSILON = 1e-3  # Keras BatchNormalization default (ONNX's default is 1e-5)
BIAS_STD = 0.01


# ---------------------------------------------------------------------------
# Specs
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReferenceLatency:
    """Published MLPerf Tiny v1.0 closed-division latencies in ms.

    All three on the same Arm Cortex-M4 board at 120 MHz (ST Nucleo-L4R5ZI), so
    they are the yardstick for a code generator targeting that class of MCU.
    """

    tflm: float  # TensorFlow Lite for Microcontrollers (reference submission)
    microtvm_cmsis_nn: float  # microTVM with CMSIS-NN kernels (OctoML)
    x_cube_ai: float  # STMicroelectronics X-CUBE-AI


@dataclass(frozen=True)
class ModelSpec:
    """One benchmark network: its shapes, what it is and how fast others run it."""

    name: str
    task: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    description: str
    reference: str  # file in mlcommons/tiny the architecture follows
    latency_ms: ReferenceLatency
    has_softmax: bool = True


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="kws_ds_cnn",
            task="keyword spotting (Speech Commands v2, 12 classes)",
            input_shape=(1, 1, 49, 10),
            output_shape=(1, 12),
            description="DS-CNN (small): conv 10x4/2 64 + 4 depthwise-separable blocks of 64, "
            "average pool, dense 12, softmax; input is 49 frames x 10 MFCCs",
            reference="benchmark/training/keyword_spotting/keras_model.py (ds_cnn)",
            latency_ms=ReferenceLatency(tflm=181.9, microtvm_cmsis_nn=99.8, x_cube_ai=75.1),
        ),
        ModelSpec(
            name="vww_mobilenet",
            task="visual wake words (person / no person)",
            input_shape=(1, 3, 96, 96),
            output_shape=(1, 2),
            description="MobileNetV1 alpha=0.25: conv 3x3/2 8 + 13 depthwise-separable blocks "
            "(16..256 filters), average pool, dense 2, softmax; ReLU as in the reference",
            reference="benchmark/training/visual_wake_words/vww_model.py (mobilenet_v1)",
            latency_ms=ReferenceLatency(tflm=600.6, microtvm_cmsis_nn=301.2, x_cube_ai=230.5),
        ),
        ModelSpec(
            name="ic_resnet8",
            task="image classification (CIFAR-10)",
            input_shape=(1, 3, 32, 32),
            output_shape=(1, 10),
            description="ResNet-8 (EEMBC ResNetv1): conv 3x3 16 + 3 residual stacks of 16/32/64 "
            "(stride 2 and 1x1 conv shortcut in stacks 2-3), average pool, dense 10, softmax",
            reference="benchmark/training/image_classification/keras_model.py (resnet_v1_eembc)",
            latency_ms=ReferenceLatency(tflm=704.2, microtvm_cmsis_nn=389.6, x_cube_ai=226.9),
        ),
        ModelSpec(
            name="ad_autoencoder",
            task="anomaly detection (ToyADMOS, reconstruction error)",
            input_shape=(1, 640),
            output_shape=(1, 640),
            description="FC autoencoder: 4 x dense 128 + BN + ReLU, bottleneck dense 8 + BN + ReLU, "
            "4 x dense 128 + BN + ReLU, dense 640 (linear); input is 5 frames x 128 log-mels",
            reference="benchmark/training/anomaly_detection/keras_model.py (get_model)",
            latency_ms=ReferenceLatency(tflm=10.1, microtvm_cmsis_nn=8.6, x_cube_ai=7.6),
            has_softmax=False,
        ),
    )
}


# ---------------------------------------------------------------------------
# Graph builder
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Tensor:
    """A value of the graph under construction; the builder tracks static shapes itself."""

    name: str
    shape: tuple[int, ...]

    @property
    def channels(self) -> int:
        return self.shape[1]


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow "same" padding (begin, end) of one spatial axis: the odd pixel goes at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class GraphBuilder:
    """Appends layers to an ONNX graph, drawing seeded weights and tracking shapes.

    Each method is one Keras layer of the reference code, so the model builders
    below read like the reference and the node/initializer boilerplate lives in
    one place. Names are ``<layer>`` for the output and ``<layer>.<param>`` for
    weights, which keeps graphs readable and the serialization deterministic.
    """

    def __init__(self, graph_name: str, input_shape: tuple[int, ...], rng: np.random.Generator) -> None:
        self.graph_name = graph_name
        self.rng = rng
        self.input = Tensor("input", tuple(input_shape))
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    # -- plumbing ----------------------------------------------------------

    def _weight(self, name: str, values: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def _node(self, op: str, inputs: list[str], name: str, shape: tuple[int, ...], **attrs: Any) -> Tensor:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return Tensor(name, shape)

    def _he_normal(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)

    def _bias(self, n: int) -> np.ndarray:
        return BIAS_STD * self.rng.standard_normal(n)

    # -- layers ------------------------------------------------------------

    def conv(self, x: Tensor, filters: int, kernel: tuple[int, int], name: str,
             stride: int = 1, groups: int = 1) -> Tensor:
        """Conv2D / DepthwiseConv2D with bias and TF "same" padding."""
        (kh, kw), (_, c, h, w) = kernel, x.shape
        fan_in = c // groups * kh * kw
        weight = self._weight(f"{name}.weight", self._he_normal((filters, c // groups, kh, kw), fan_in))
        bias = self._weight(f"{name}.bias", self._bias(filters))
        (top, bottom), (left, right) = same_pads(h, kh, stride), same_pads(w, kw, stride)
        out = (1, filters, -(-h // stride), -(-w // stride))
        return self._node(
            "Conv", [x.name, weight, bias], name, out, kernel_shape=[kh, kw], strides=[stride, stride],
            pads=[top, left, bottom, right], group=groups,
        )  # fmt: skip

    def depthwise(self, x: Tensor, name: str, stride: int = 1) -> Tensor:
        """DepthwiseConv2D 3x3, depth multiplier 1: a grouped conv with one group per channel."""
        return self.conv(x, x.channels, (3, 3), name, stride=stride, groups=x.channels)

    def batch_norm(self, x: Tensor, name: str) -> Tensor:
        """Inference-mode batch norm with statistics close to the identity (see module doc)."""
        c, rng = x.channels, self.rng
        params = [
            self._weight(f"{name}.scale", rng.uniform(0.8, 1.2, c)),
            self._weight(f"{name}.bias", 0.1 * rng.standard_normal(c)),
            self._weight(f"{name}.mean", 0.1 * rng.standard_normal(c)),
            self._weight(f"{name}.var", rng.uniform(0.5, 1.5, c)),
        ]
        return self._node("BatchNormalization", [x.name, *params], name, x.shape, epsilon=BN_EPSILON)

    def relu(self, x: Tensor, name: str) -> Tensor:
        return self._node("Relu", [x.name], name, x.shape)

    def add(self, a: Tensor, b: Tensor, name: str) -> Tensor:
        assert a.shape == b.shape, (a, b)
        return self._node("Add", [a.name, b.name], name, a.shape)

    def avg_pool(self, x: Tensor, kernel: tuple[int, int], name: str) -> Tensor:
        """Keras AveragePooling2D(pool_size=kernel): stride = kernel, "valid" padding."""
        (kh, kw), (n, c, h, w) = kernel, x.shape
        out = (n, c, (h - kh) // kh + 1, (w - kw) // kw + 1)
        return self._node("AveragePool", [x.name], name, out, kernel_shape=[kh, kw], strides=[kh, kw])

    def global_avg_pool(self, x: Tensor, name: str) -> Tensor:
        return self._node("GlobalAveragePool", [x.name], name, (*x.shape[:2], 1, 1))

    def flatten(self, x: Tensor, name: str) -> Tensor:
        return self._node("Flatten", [x.name], name, (x.shape[0], math.prod(x.shape[1:])), axis=1)

    def dense(self, x: Tensor, units: int, name: str) -> Tensor:
        """Keras Dense as Gemm with the weight stored [out, in] (transB), like ONNX converters emit."""
        k = x.shape[1]
        weight = self._weight(f"{name}.weight", self._he_normal((units, k), k))
        bias = self._weight(f"{name}.bias", self._bias(units))
        return self._node("Gemm", [x.name, weight, bias], name, (x.shape[0], units), transB=1)

    def softmax(self, x: Tensor, name: str) -> Tensor:
        return self._node("Softmax", [x.name], name, x.shape, axis=-1)

    # -- composites --------------------------------------------------------

    def conv_bn_relu(self, x: Tensor, filters: int, kernel: tuple[int, int], name: str, stride: int = 1) -> Tensor:
        y = self.conv(x, filters, kernel, name, stride=stride)
        return self.relu(self.batch_norm(y, f"{name}_bn"), f"{name}_relu")

    def separable_block(self, x: Tensor, filters: int, name: str, stride: int = 1) -> Tensor:
        """Depthwise 3x3 + BN + ReLU, then pointwise 1x1 + BN + ReLU (DS-CNN and MobileNetV1)."""
        y = self.depthwise(x, f"{name}_dw", stride=stride)
        y = self.relu(self.batch_norm(y, f"{name}_dw_bn"), f"{name}_dw_relu")
        return self.conv_bn_relu(y, filters, (1, 1), f"{name}_pw")

    def dense_bn_relu(self, x: Tensor, units: int, name: str) -> Tensor:
        y = self.dense(x, units, name)
        return self.relu(self.batch_norm(y, f"{name}_bn"), f"{name}_relu")

    # -- result ------------------------------------------------------------

    def finish(self, y: Tensor, doc: str) -> onnx.ModelProto:
        """Rename the last value to ``output`` and wrap everything in a model."""
        assert self.nodes and self.nodes[-1].output[0] == y.name, "the output must be the last node"
        self.nodes[-1].output[0] = "output"
        graph = helper.make_graph(
            self.nodes, self.graph_name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(self.input.shape))],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(y.shape))],
            initializer=self.initializers, doc_string=doc,
        )  # fmt: skip
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tessera.testing.mlperf_tiny"
        )
        model.ir_version = IR_VERSION
        return model


# ---------------------------------------------------------------------------
# The four networks
# ---------------------------------------------------------------------------


def _kws_ds_cnn(b: GraphBuilder) -> Tensor:
    """DS-CNN small; Dropout layers of the reference are inference no-ops and omitted.

    The reference pools with ``pool_size = (49 // 2, 10 // 2) = (24, 5)`` over a
    25x5 map, so the last time step is not averaged; we keep that quirk.
    """
    filters = 64
    x = b.conv_bn_relu(b.input, filters, (10, 4), "conv1", stride=2)
    for i in range(1, 5):
        x = b.separable_block(x, filters, f"block{i}")
    (_, _, h, w) = b.input.shape
    x = b.avg_pool(x, (h // 2, w // 2), "pool")
    return b.softmax(b.dense(b.flatten(x, "flatten"), 12, "fc"), "softmax")


# (pointwise filters, depthwise stride) of MobileNetV1's 13 separable blocks at alpha=1/4.
_MOBILENET_BLOCKS = (
    (16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2),
    (128, 1), (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1),
)  # fmt: skip


def _vww_mobilenet(b: GraphBuilder) -> Tensor:
    """MobileNetV1 0.25 as in vww_model.py: plain ReLU (Keras applications use ReLU6), biases on."""
    x = b.conv_bn_relu(b.input, 8, (3, 3), "conv1", stride=2)
    for i, (filters, stride) in enumerate(_MOBILENET_BLOCKS, start=1):
        x = b.separable_block(x, filters, f"block{i}", stride=stride)
    x = b.global_avg_pool(x, "pool")  # the reference's AveragePooling2D covers the whole 3x3 map
    return b.softmax(b.dense(b.flatten(x, "flatten"), 2, "fc"), "softmax")


def _residual_stack(b: GraphBuilder, x: Tensor, filters: int, name: str, stride: int) -> Tensor:
    """Two 3x3 convs plus a shortcut: identity, or a 1x1 strided conv (no BN) when the shape changes."""
    y = b.conv_bn_relu(x, filters, (3, 3), f"{name}_conv1", stride=stride)
    y = b.batch_norm(b.conv(y, filters, (3, 3), f"{name}_conv2"), f"{name}_conv2_bn")
    if stride != 1 or filters != x.channels:
        x = b.conv(x, filters, (1, 1), f"{name}_shortcut", stride=stride)
    return b.relu(b.add(x, y, f"{name}_add"), f"{name}_relu")


def _ic_resnet8(b: GraphBuilder) -> Tensor:
    """ResNet-8 of the v1.0 reference (16 base filters; later revisions default to 26)."""
    x = b.conv_bn_relu(b.input, 16, (3, 3), "conv1")
    x = _residual_stack(b, x, 16, "stack1", stride=1)
    x = _residual_stack(b, x, 32, "stack2", stride=2)
    x = _residual_stack(b, x, 64, "stack3", stride=2)
    x = b.global_avg_pool(x, "pool")  # AveragePooling2D(pool_size=8) on the 8x8 map
    return b.softmax(b.dense(b.flatten(x, "flatten"), 10, "fc"), "softmax")


def _ad_autoencoder(b: GraphBuilder) -> Tensor:
    """Dense autoencoder 640-128x4-8-128x4-640; the bottleneck has BN + ReLU too, the output is linear."""
    x = b.input
    for i, units in enumerate((128, 128, 128, 128, 8, 128, 128, 128, 128), start=1):
        x = b.dense_bn_relu(x, units, f"dense{i}")
    return b.dense(x, b.input.shape[1], "dense_out")


_BUILDERS: dict[str, Callable[[GraphBuilder], Tensor]] = {
    "kws_ds_cnn": _kws_ds_cnn,
    "vww_mobilenet": _vww_mobilenet,
    "ic_resnet8": _ic_resnet8,
    "ad_autoencoder": _ad_autoencoder,
}


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown MLPerf Tiny model {name!r}; choose one of {sorted(MODELS)}") from None


def build(name: str, seed: int = 0) -> onnx.ModelProto:
    """Build model ``name`` with weights drawn from ``seed``; same arguments give identical bytes.

    The random stream is keyed by (seed, model name), so two models built with the
    same seed do not share weight values.
    """
    spec = _spec(name)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    b = GraphBuilder(name, spec.input_shape, rng)
    y = _BUILDERS[name](b)
    assert y.shape == spec.output_shape, (name, y.shape, spec.output_shape)
    return b.finish(y, f"MLPerf Tiny v1.0 {spec.task}: {spec.description}. Random weights, seed {seed}.")


def model_path(name: str, seed: int = 0) -> Path:
    """Path of the cached ``.onnx`` file of ``build(name, seed)``, building it if missing.

    Lives next to the toolchain's object cache (``$TESSERA_CACHE_DIR`` or
    ``~/.cache/tessera``) under ``models/``; the file is a checksummed cache entry, written
    atomically because parallel test workers may race on it, and rebuilt when damaged.
    """
    _spec(name)
    directory = cache_dir().parent / "models"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-seed{seed}-v{BUILD_VERSION}.onnx"
    if not intact(path):
        store_cache_entry(path, build(name, seed).SerializeToString())
    return path


def sample_input(name: str, seed: int = 0) -> np.ndarray:
    """A seeded standard-normal float32 input of the model's shape (stands in for MFCCs, pixels, mels)."""
    return seeded_input(_spec(name).input_shape, seed)


# ---------------------------------------------------------------------------
# Graph statistics
# ---------------------------------------------------------------------------


def count_params(model: onnx.ModelProto) -> int:
    """Number of stored weight values (including batch-norm mean / variance)."""
    return sum(math.prod(t.dims) for t in model.graph.initializer)


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the weights as stored (float32)."""
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    return {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*g.input, *g.value_info, *g.output]
    } | {t.name: list(t.dims) for t in g.initializer}


def count_macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of Conv, Gemm and MatMul, from the graph's inferred shapes.

    Batch norm, activations, pooling and residual adds are not counted, the usual
    convention for MLPerf Tiny / TFLite MAC figures.
    """
    shapes = _static_shapes(model)
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            weight = shapes[node.input[1]]  # [M, C/group, kh, kw]
            total += math.prod(shapes[node.output[0]]) * math.prod(weight[1:])
        elif node.op_type in ("Gemm", "MatMul"):
            a = shapes[node.input[0]]
            trans_a = any(at.name == "transA" and at.i for at in node.attribute)
            k = a[-2] if trans_a and node.op_type == "Gemm" else a[-1]
            total += math.prod(shapes[node.output[0]]) * k
    return total
