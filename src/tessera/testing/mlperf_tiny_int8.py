"""The four MLPerf Tiny models quantised to int8 by onnxruntime, deterministically.

Why this exists: microcontroller deployments run int8 (the published MLPerf
Tiny Cortex-M4 latencies are for int8 models), so tessera's int8 path is
tested and benchmarked on the same four networks as the float32 path
(`mlperf_tiny`). The float32 model is first simplified the way every int8
deployment flow does it (TFLite's converter, ORT's ``quant_pre_process``):
each BatchNormalization is folded into the Conv / Gemm before it, so there is
nothing left to quantise but Conv, Gemm, Relu, Add, pooling, Flatten and
Softmax. Then ``onnxruntime.quantization.quantize_static`` quantises it with
int8 activations (asymmetric) and int8 weights (symmetric), calibrating
MinMax ranges on ``CALIBRATION_SAMPLES`` seeded standard-normal inputs.

Two formats, as onnxruntime produces them:

* ``QDQ``: ``QuantizeLinear`` / ``DequantizeLinear`` pairs around float ops
  (the form the tests and the benchmark use);
* ``QOperator``: ``QLinearConv``, ``QLinearMatMul``, ``QLinearAdd``, ... .

Same arguments give byte-identical files (the script checks it).
"""

from __future__ import annotations

import enum
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ..target.toolchain import cache_dir
from ..util.digest import intact, store_cache_entry
from . import mlperf_tiny
from .models import seeded_input

__all__ = ["CALIBRATION_SAMPLES", "QuantFormat", "fold_batch_norms", "model_path", "quantize"]

CALIBRATION_SAMPLES = 16
# Bump whenever the recipe changes, so cached files from older code are not reused.
QUANT_VERSION = 1


class QuantFormat(enum.Enum):
    QDQ = "qdq"
    QOPERATOR = "qop"


def fold_batch_norms(model: onnx.ModelProto) -> onnx.ModelProto:
    """Copy of `model` with every BatchNormalization folded into the Conv / Gemm feeding it.

    The producer's output must feed only the batch norm (true in the MLPerf
    Tiny graphs); y = (x - mean) / sqrt(var + eps) * scale + bias becomes new
    weights ``W * k`` (per output channel) and bias ``(b - mean) * k + bias``.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    users: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    keep = []
    for node in g.node:
        if node.op_type != "BatchNormalization":
            keep.append(node)
            continue
        prev = producer.get(node.input[0])
        if prev is None or prev.op_type not in ("Conv", "Gemm") or users[node.input[0]] != 1:
            raise ValueError(f"cannot fold batch norm {node.name!r}: it must follow a Conv or Gemm used only by it")
        scale, bias, mean, var = (numpy_helper.to_array(inits[i]).astype(np.float64) for i in node.input[1:5])
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        k = scale / np.sqrt(var + eps)
        w = numpy_helper.to_array(inits[prev.input[1]]).astype(np.float64)
        b = numpy_helper.to_array(inits[prev.input[2]]).astype(np.float64)
        w = w * k.reshape((-1,) + (1,) * (w.ndim - 1))  # Conv OIHW and Gemm transB [out, in] alike
        inits[prev.input[1]].CopyFrom(numpy_helper.from_array(w.astype(np.float32), prev.input[1]))
        inits[prev.input[2]].CopyFrom(numpy_helper.from_array(((b - mean) * k + bias).astype(np.float32),
                                                              prev.input[2]))
        prev.output[0] = node.output[0]
        for name in node.input[1:5]:
            g.initializer.remove(inits.pop(name))
    del g.node[:]
    g.node.extend(keep)
    return out


class _SeededReader:
    """The CalibrationDataReader protocol over seeded inputs (seeds 1000.. so the test input is unseen)."""

    def __init__(self, name: str, samples: int) -> None:
        shape = mlperf_tiny.MODELS[name].input_shape
        self._feeds = iter([{"input": seeded_input(shape, 1000 + k)} for k in range(samples)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def quantize(name: str, seed: int = 0, fmt: QuantFormat = QuantFormat.QDQ, per_channel: bool = True,
             samples: int = CALIBRATION_SAMPLES) -> onnx.ModelProto:
    """``mlperf_tiny.build(name, seed)`` with batch norms folded, quantised by onnxruntime."""
    from onnxruntime import quantization as q

    float_model = fold_batch_norms(mlperf_tiny.build(name, seed))
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(float_model, src)
        q.quantize_static(
            str(src), str(dst), _SeededReader(name, samples),
            quant_format=q.QuantFormat.QDQ if fmt is QuantFormat.QDQ else q.QuantFormat.QOperator,
            activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8, per_channel=per_channel,
            calibrate_method=q.CalibrationMethod.MinMax,
        )
        model = onnx.load(dst)
    model.graph.doc_string = f"{float_model.graph.doc_string} Quantised to int8 ({fmt.value}) by onnxruntime."
    return model


def model_path(name: str, seed: int = 0, fmt: QuantFormat = QuantFormat.QDQ, per_channel: bool = True) -> Path:
    """Path of the cached ``.onnx`` file of ``quantize(name, seed, fmt, per_channel)``, built if missing."""
    if name not in mlperf_tiny.MODELS:
        raise KeyError(f"unknown MLPerf Tiny model {name!r}; choose one of {sorted(mlperf_tiny.MODELS)}")
    directory = cache_dir().parent / "models"
    directory.mkdir(parents=True, exist_ok=True)
    channel = "pc" if per_channel else "pt"
    path = directory / (f"{name}-seed{seed}-v{mlperf_tiny.BUILD_VERSION}-int8-{fmt.value}-{channel}"
                        f"-q{QUANT_VERSION}.onnx")
    if not intact(path):
        store_cache_entry(path, quantize(name, seed, fmt, per_channel).SerializeToString())
    return path
