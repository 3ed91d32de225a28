"""Seeded random weights for ONNX models whose stored weights are placeholders.

Why this exists: the "light" model zoo networks shipped with the ``onnx`` package
(``onnx/backend/test/data/light/*.onnx``: AlexNet, DenseNet-121, Inception v1/v2,
ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) keep the real graphs but
replace almost every weight by a ``ConstantOfShape`` node filled with 0.02. With
such weights every output channel of a layer is identical, so the stored
reference output is a perfectly uniform softmax (1/1000 everywhere). A compiler
that gets a convolution's layout, padding, grouping or a concat order wrong still
produces that same uniform vector and would pass. Replacing the constants by
random values of the same shape makes each output sensitive to every weight and
to the exact wiring, so comparing against onnxruntime becomes a real test.

The values are scaled so that activations neither explode nor vanish through
50+ layers (``scripts/check_random_weights.py`` checks the nine light models):

* Conv / Gemm / MatMul weights: normal with ``std = sqrt(gain / fan_in)``; the
  gain is 2 (He) when the layer's input comes from a ReLU, else 1 (LeCun), so
  linear bottlenecks (ShuffleNet) do not double the variance at every layer;
* biases (Conv / Gemm input 2): ``0.01 * normal``;
* BatchNormalization: scale ``U(0.8, 1.2)``, bias ``0.1 * normal``,
  mean ``0.1 * normal``, variance ``U(0.5, 1.5)``;
* per-channel affine constants (``Mul`` / ``Add`` by a constant vector, as in the
  ``Unsqueeze + Mul + Add`` batch-norm tail of DenseNet and Inception v2):
  scale ``1 + 0.1 * normal``, shift ``0.1 * normal``;
* residual merges (``Add`` / ``Sum`` of computed tensors): a batch norm feeding a
  merge next to an identity shortcut has its scale multiplied by
  ``RESIDUAL_BRANCH_GAIN``; if every operand is batch-normed (projection
  shortcut), each gets ``1 / sqrt(n)``. Random BN statistics do not normalise, so
  without this the variance of ResNet-50 / ShuffleNet grows geometrically with
  depth (logits std ~1e4..1e5).

A constant's role is found from its consumer, looking through ``Reshape``,
``Unsqueeze``, ``Squeeze``, ``Flatten`` and ``Identity``. Constants with no such
role (shapes, int64 tensors, scalars, PRelu slopes, unused tensors) are left
untouched. Only the main graph is rewritten, not ``If``/``Loop`` bodies.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["RESIDUAL_BRANCH_GAIN", "WeightInfo", "find_weights", "randomize_weights"]

# Scale multiplier of a residual branch's last batch norm: small enough that 16
# ResNet blocks do not blow up, large enough that a wrong branch is still visible.
RESIDUAL_BRANCH_GAIN = 0.3

# Ops that only re-view a tensor: a weight keeps its role through them.
_PASS_THROUGH = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"}

# Ops through which "the input was rectified" still holds (they keep values >= 0).
_KEEPS_SIGN = _PASS_THROUGH | {
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Dropout",
    "LRN", "Transpose", "Pad",
}  # fmt: skip

_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}

# (op_type, input index) -> role, for consumers whose role does not depend on attributes.
_INPUT_ROLES = {
    ("Conv", 1): "conv_weight",
    ("Conv", 2): "bias",
    ("Gemm", 2): "bias",
    ("MatMul", 1): "matmul_weight",
    ("BatchNormalization", 1): "bn_scale",
    ("BatchNormalization", 2): "bn_bias",
    ("BatchNormalization", 3): "bn_mean",
    ("BatchNormalization", 4): "bn_var",
}

# Roles of a constant that multiplies / is added to a computed tensor.
_AFFINE_ROLES = {"Mul": "affine_scale", "Add": "affine_shift"}

# Roles sampled from a normal scaled by fan-in.
_MATRIX_ROLES = {"conv_weight", "gemm_weight", "gemm_weight_t", "matmul_weight"}

_CONSTANT_OPS = ("Constant", "ConstantOfShape")

Uses = dict[str, list[tuple[onnx.NodeProto, int]]]


@dataclass(frozen=True)
class WeightInfo:
    """A float constant that :func:`randomize_weights` will replace.

    ``source`` is ``"initializer"``, ``"ConstantOfShape"`` or ``"Constant"``.
    ``gain`` is the variance gain for matrix weights (2 after a ReLU, else 1)
    and a value multiplier for ``bn_scale`` (residual damping); otherwise 1.
    """

    name: str
    role: str
    shape: tuple[int, ...]
    dtype: int
    source: str
    gain: float = 1.0


def find_weights(model: onnx.ModelProto) -> dict[str, WeightInfo]:
    """Float constants of the main graph that act as weights, keyed by tensor name."""
    graph = model.graph
    consumers = _consumers(graph)
    producers = {out: node for node in graph.node for out in node.output}
    floats = _float_constants(graph)
    constant = _constant_tensors(graph)
    bn_gains = _residual_gains(graph, producers, constant)
    found: dict[str, WeightInfo] = {}
    for name, (shape, dtype, source) in floats.items():
        use = _role(name, consumers, constant, math.prod(shape))
        if use is None:
            continue
        role, node = use
        gain = 1.0
        if role in _MATRIX_ROLES:
            gain = 2.0 if _is_rectified(node.input[0], producers) else 1.0
        elif role == "bn_scale":
            gain = bn_gains.get(node.output[0], 1.0)
        found[name] = WeightInfo(name, role, shape, dtype, source, gain)
    return found


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Copy of ``model`` with every weight replaced by seeded random values.

    Weights keep their name, shape and dtype. Weights that were produced by
    ``ConstantOfShape`` / ``Constant`` nodes become initializers (the node, and
    its shape initializer if nothing else uses it, are removed); for IR version
    < 4 they are also listed as graph inputs, as that IR version requires.
    Each tensor's values depend only on ``seed`` and the tensor's name.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    weights = find_weights(out)
    values = {w.name: _sample(w, seed) for w in weights.values()}

    for init in graph.initializer:
        if init.name in values:
            init.CopyFrom(numpy_helper.from_array(values[init.name], name=init.name))

    from_nodes = [w for w in weights.values() if w.source != "initializer"]
    _drop_producers(graph, {w.name for w in from_nodes})
    for w in from_nodes:
        graph.initializer.append(numpy_helper.from_array(values[w.name], name=w.name))
        if out.ir_version < 4:
            graph.input.append(helper.make_tensor_value_info(w.name, w.dtype, list(w.shape)))
    return out


# ----------------------------------------------------------------------------
# Finding constants
# ----------------------------------------------------------------------------


def _consumers(graph: onnx.GraphProto) -> Uses:
    """Tensor name -> [(consumer node, input index)]."""
    uses: Uses = defaultdict(list)
    for node in graph.node:
        for idx, name in enumerate(node.input):
            if name:
                uses[name].append((node, idx))
    return uses


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Names of all tensors computable without the graph's real inputs."""
    const = {i.name for i in graph.initializer}
    for node in graph.node:  # nodes are topologically sorted
        inputs = [i for i in node.input if i]
        if all(i in const for i in inputs):
            const.update(node.output)
    return const


def _float_constants(graph: onnx.GraphProto) -> dict[str, tuple[tuple[int, ...], int, str]]:
    """Name -> (shape, dtype, source) for every float constant of static shape."""
    ints = {i.name: numpy_helper.to_array(i) for i in graph.initializer if i.data_type == TensorProto.INT64}
    found: dict[str, tuple[tuple[int, ...], int, str]] = {}
    for init in graph.initializer:
        if init.data_type in _FLOAT_TYPES:
            found[init.name] = (tuple(init.dims), init.data_type, "initializer")
    for node in graph.node:
        if node.op_type == "Constant":
            _collect_constant_node(node, ints, found)
        elif node.op_type == "ConstantOfShape":
            _collect_constant_of_shape(node, ints, found)
    return found


def _collect_constant_node(node: onnx.NodeProto, ints: dict[str, np.ndarray], found: dict) -> None:
    """Record a float ``Constant``'s tensor; remember int64 ones as possible shapes."""
    attr = next((a for a in node.attribute if a.name == "value"), None)
    if attr is None:
        return
    tensor = attr.t
    if tensor.data_type in _FLOAT_TYPES:
        found[node.output[0]] = (tuple(tensor.dims), tensor.data_type, "Constant")
    elif tensor.data_type == TensorProto.INT64:
        ints[node.output[0]] = numpy_helper.to_array(tensor)


def _collect_constant_of_shape(node: onnx.NodeProto, ints: dict[str, np.ndarray], found: dict) -> None:
    """Record a float ``ConstantOfShape`` whose shape input is a known constant."""
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    dtype = value.data_type if value is not None else TensorProto.FLOAT  # spec default
    shape = ints.get(node.input[0])
    if dtype in _FLOAT_TYPES and shape is not None:
        found[node.output[0]] = (tuple(int(d) for d in shape.ravel()), dtype, "ConstantOfShape")


# ----------------------------------------------------------------------------
# Roles and gains
# ----------------------------------------------------------------------------


def _role(name: str, consumers: Uses, constant: set[str], size: int) -> tuple[str, onnx.NodeProto] | None:
    """Role of a constant and the node using it, from the first recognised consumer."""
    pending, seen = [name], set()
    while pending:
        tensor = pending.pop(0)
        if tensor in seen:
            continue
        seen.add(tensor)
        for node, idx in consumers.get(tensor, []):
            if node.op_type in _PASS_THROUGH and idx == 0:
                pending.append(node.output[0])
                continue
            role = _consumer_role(node, idx, constant, size)
            if role is not None:
                return role, node
    return None


def _consumer_role(node: onnx.NodeProto, idx: int, constant: set[str], size: int) -> str | None:
    """Role implied by being input ``idx`` of ``node``, or None if not a weight use."""
    if node.op_type == "Gemm" and idx == 1:
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return "gemm_weight_t" if trans_b else "gemm_weight"
    if node.op_type in _AFFINE_ROLES and len(node.input) == 2:
        # Only per-channel vectors scaling / shifting a computed tensor count;
        # a scalar (e.g. x / 16 input scaling) is a fixed constant, not a weight.
        other = node.input[1 - idx]
        return _AFFINE_ROLES[node.op_type] if size > 1 and other not in constant else None
    return _INPUT_ROLES.get((node.op_type, idx))


def _is_rectified(tensor: str, producers: dict[str, onnx.NodeProto]) -> bool:
    """Whether ``tensor`` is a ReLU output, possibly pooled / reshaped / concatenated."""
    node = producers.get(tensor)
    if node is None:
        return False
    if node.op_type == "Relu":
        return True
    if node.op_type == "Concat":
        return all(_is_rectified(i, producers) for i in node.input)
    return node.op_type in _KEEPS_SIGN and _is_rectified(node.input[0], producers)


def _residual_gains(graph: onnx.GraphProto, producers: dict[str, onnx.NodeProto], constant: set[str]) -> dict[str, float]:
    """BatchNormalization output name -> scale multiplier for residual merges."""
    gains: dict[str, float] = {}
    for node in graph.node:
        operands = [i for i in node.input if i]
        if node.op_type not in ("Add", "Sum") or len(operands) < 2 or any(i in constant for i in operands):
            continue
        norms = [_feeding_norm(i, producers, constant) for i in operands]
        gain = 1.0 / math.sqrt(len(operands)) if all(norms) else RESIDUAL_BRANCH_GAIN
        for bn in filter(None, norms):
            gains[bn.output[0]] = gain
    return gains


def _feeding_norm(tensor: str, producers: dict[str, onnx.NodeProto], constant: set[str]) -> onnx.NodeProto | None:
    """The BatchNormalization producing ``tensor``, looking through a constant affine tail."""
    node = producers.get(tensor)
    while node is not None and node.op_type in ("Mul", "Add", "Identity"):
        computed = [i for i in node.input if i and i not in constant]
        if len(computed) != 1:
            return None
        node = producers.get(computed[0])
    return node if node is not None and node.op_type == "BatchNormalization" else None


# ----------------------------------------------------------------------------
# Sampling and graph surgery
# ----------------------------------------------------------------------------


def _fan_in(role: str, shape: tuple[int, ...]) -> int:
    """Inputs summed per output element.

    Gemm/MatMul weights may reach their consumer through a Reshape (Inception v1
    stores its classifier as [1, 1, 1000, 1024]); reading the matrix dims from the
    end of the stored shape keeps the fan-in right in that case.
    """
    size = math.prod(shape)
    if role == "conv_weight":  # [O, C/group, k...]
        return max(1, size // shape[0])
    if role == "gemm_weight_t":  # [N, K]
        return shape[-1]
    if role == "gemm_weight":  # [K, N]
        return max(1, size // shape[-1])
    return shape[-2] if len(shape) >= 2 else shape[0]  # MatMul: [..., K, N]


def _sample(w: WeightInfo, seed: int) -> np.ndarray:
    """Random values for one weight; the stream depends on (seed, name) only."""
    rng = np.random.default_rng([seed, zlib.crc32(w.name.encode())])
    shape = w.shape
    if w.role in _MATRIX_ROLES:
        values = rng.standard_normal(shape) * math.sqrt(w.gain / _fan_in(w.role, shape))
    elif w.role == "bias":
        values = 0.01 * rng.standard_normal(shape)
    elif w.role == "bn_scale":
        values = w.gain * rng.uniform(0.8, 1.2, shape)
    elif w.role == "bn_var":
        values = rng.uniform(0.5, 1.5, shape)
    elif w.role == "affine_scale":
        values = 1.0 + 0.1 * rng.standard_normal(shape)
    else:  # bn_bias, bn_mean, affine_shift
        values = 0.1 * rng.standard_normal(shape)
    return values.astype(helper.tensor_dtype_to_np_dtype(w.dtype))


def _drop_producers(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove the constant nodes producing ``names``, then the shapes they alone used."""
    dropped = [n for n in graph.node if n.op_type in _CONSTANT_OPS and n.output[0] in names]
    if not dropped:
        return
    _remove_nodes(graph, names)
    still_used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    orphans = {i for n in dropped for i in n.input if i and i not in still_used}
    _remove_nodes(graph, orphans)  # a shape may come from a Constant node
    _keep_only(graph.initializer, lambda t: t.name not in orphans)
    _keep_only(graph.input, lambda v: v.name not in orphans)


def _remove_nodes(graph: onnx.GraphProto, outputs: set[str]) -> None:
    """Remove the Constant / ConstantOfShape nodes whose output is in ``outputs``."""
    _keep_only(graph.node, lambda n: not (n.op_type in _CONSTANT_OPS and n.output[0] in outputs))


def _keep_only(field: Any, keep: Callable[[Any], bool]) -> None:
    """Filter a repeated protobuf field (nodes, initializers, inputs) in place."""
    kept = [item for item in field if keep(item)]
    del field[:]
    field.extend(kept)
