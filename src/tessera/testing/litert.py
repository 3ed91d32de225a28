"""LiteRT (the TFLite interpreter) as the oracle of TFLite models, and the committed test models.

The reference kernels (``OpResolverType.BUILTIN_REF``) are the oracle: they are
the arithmetic TFLite Micro and CMSIS-NN implement on microcontrollers, and
they do not depend on the host's SIMD. LiteRT's optimized x86 kernels differ
in rounding: convolutions that go through its GEMM library round once where
the reference rounds twice, so they are one step off on rare ties.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "tflite"
MLPERF_TINY = ("kws_ds_cnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")


def mlperf_tiny_path(name: str) -> Path:
    """The int8 .tflite of one MLPerf Tiny model (made by scripts/make_tflite_models.py)."""
    if name not in MLPERF_TINY:
        raise KeyError(f"unknown MLPerf Tiny model {name!r}; choose one of {list(MLPERF_TINY)}")
    return DATA / "mlperf_tiny" / f"{name}.int8.tflite"


def interpreter(model: str | Path | bytes) -> Any:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = OpResolverType.BUILTIN_REF
    if isinstance(model, (bytes, bytearray)):
        return Interpreter(model_content=bytes(model), experimental_op_resolver_type=kind)
    return Interpreter(model_path=str(model), experimental_op_resolver_type=kind)


def input_specs(model: str | Path | bytes) -> list[tuple[tuple[int, ...], np.dtype]]:
    it = interpreter(model)
    return [(tuple(int(d) for d in x["shape"]), np.dtype(x["dtype"])) for x in it.get_input_details()]


def run_litert(model: str | Path | bytes, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """LiteRT's outputs for `inputs` (by position) with its reference kernels."""
    it = interpreter(model)
    it.allocate_tensors()
    details = it.get_input_details()
    if len(details) != len(inputs):
        raise ValueError(f"the model takes {len(details)} inputs, got {len(inputs)}")
    for d, x in zip(details, inputs):
        it.set_tensor(d["index"], np.ascontiguousarray(x, dtype=d["dtype"]))
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def seeded_inputs(model: str | Path | bytes, seed: int = 0) -> list[np.ndarray]:
    """Random inputs: int8 over its whole range, float32 ~ 2 N(0, 1)."""
    rng = np.random.default_rng(seed)
    values = []
    for shape, dtype in input_specs(model):
        if dtype == np.int8:
            values.append(rng.integers(-128, 128, shape, dtype=np.int8))
        else:
            values.append((2 * rng.standard_normal(shape)).astype(dtype))
    return values
