"""The ONNX light models and helpers to compare tessera with onnxruntime.

Shared by the conformance tests, the benchmarks and the weight check script.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper

if TYPE_CHECKING:  # imported when a reference run needs it
    import onnxruntime

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
LIGHT_MODELS = (
    "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
    "shufflenet", "squeezenet", "vgg19", "zfnet512",
)


def light_path(name: str) -> Path:
    return LIGHT_DIR / f"light_{name}.onnx"


def stored_output(name: str) -> np.ndarray:
    tensor = onnx.load_tensor(str(LIGHT_DIR / f"light_{name}_output_0.pb"))
    return onnx.numpy_helper.to_array(tensor)


def logits_name(model: onnx.ModelProto) -> str:
    """Input of the last Softmax node, or the first graph output if there is none."""
    softmaxes = [n for n in model.graph.node if n.op_type == "Softmax"]
    return softmaxes[-1].input[0] if softmaxes else model.graph.output[0].name


def with_output(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """Copy of `model` that also returns tensor `name` (if not already an output)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if name not in {o.name for o in out.graph.output}:
        out.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return out


def data_input(model: onnx.ModelProto) -> tuple[str, list[int]]:
    """Name and static shape of the one graph input that is not an initializer."""
    inits = {i.name for i in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in inits]
    return inp.name, [d.dim_value for d in inp.type.tensor_type.shape.dim]


def is_quantized(model: onnx.ModelProto) -> bool:
    """Whether the model quantises (QDQ or QLinear* operators)."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") or n.op_type.startswith(("QLinear", "QGemm"))
               for n in model.graph.node)


def ort_session(model: onnx.ModelProto, threads: int = 1, optimize: bool = True) -> onnxruntime.InferenceSession:
    """`optimize=False`: no graph optimisations, so a QDQ model runs as ONNX defines it
    (onnxruntime otherwise fuses it into its own int8 kernels, e.g. a table-driven softmax)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # ResNet/ZFNet carry an unused initializer ORT warns about
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_run(model: onnx.ModelProto, feed: dict[str, np.ndarray], outputs: list[str] | None = None,
            threads: int = 1, optimize: bool = True) -> list[np.ndarray]:
    """Run `model` in onnxruntime (single-threaded by default)."""
    return ort_session(model, threads, optimize).run(outputs, feed)


def seeded_input(shape: list[int] | tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
