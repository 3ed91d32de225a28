"""The model `tessera run --check` / `--compare-onnx` compares with: ONNX (onnxruntime) or TFLite (LiteRT).

The reference must be the model the module was compiled from: same inputs
(count, order, shapes, dtypes) and same outputs. Anything else is refused
with both signatures, instead of a KeyError from onnxruntime's feed or a
broadcast that compares the wrong numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Union

import numpy as np

from ..errors import TesseraError
from .inputs import InputSpec
from .model_files import ModelFormat, embedded_format
from .reference_tflite import TFLiteReference, load_tflite_reference, run_tflite_reference, tflite_match_inputs, \
    tflite_named_like

if TYPE_CHECKING:
    import onnx

Reference = Union["onnx.ModelProto", TFLiteReference]


def oracle_name(model: Reference) -> str:
    return ModelFormat.TFLITE.oracle if isinstance(model, TFLiteReference) else ModelFormat.ONNX.oracle


def load_reference(source: str | bytes, label: str) -> Reference:
    """`source`: a path, or the bytes of a model embedded in a Model Library Format export."""
    if embedded_format(source) is ModelFormat.TFLITE:
        return load_tflite_reference(source, label)
    import onnx  # not at import time: `tessera ops` and `--help` should start fast

    try:
        return onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(source)
    except Exception as err:  # protobuf's decode and JSON errors and OSError share no narrower base
        raise TesseraError(f"{label}: cannot read it as an ONNX model ({type(err).__name__}: {err})") from None


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds (initializers listed as inputs are weights, not inputs)."""
    initialized = {init.name for init in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initialized]


def _declared(vi: onnx.ValueInfoProto) -> tuple[tuple[int | None, ...] | None, np.dtype | None]:
    """Declared shape (None for a symbolic dimension) and dtype; None where the model leaves it open."""
    from onnx import helper

    ty = vi.type.tensor_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(ty.elem_type)) if ty.elem_type else None
    if not ty.HasField("shape"):
        return None, dtype
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in ty.shape.dim), dtype


def _fits(declared: tuple[int | None, ...] | None, shape: tuple[int, ...]) -> bool:
    return declared is None or (len(declared) == len(shape) and
                                all(d is None or d == s for d, s in zip(declared, shape)))


def named_like(model: Reference, specs: Sequence[InputSpec]) -> list[InputSpec]:
    """The module's inputs named first by the ONNX model's names, position by position.

    The module may hold cleaned-up names (`a b` becomes `a_b`); the user knows the model's.
    """
    if isinstance(model, TFLiteReference):
        return tflite_named_like(model, specs)
    ins = graph_inputs(model)
    if len(ins) != len(specs):
        return list(specs)
    return [replace(spec, names=(vi.name,) + tuple(n for n in spec.names if n != vi.name))
            for vi, spec in zip(ins, specs)]


def match_inputs(model: Reference, specs: Sequence[InputSpec], label: str) -> list[InputSpec]:
    """`named_like`, after checking that the model declares the module's inputs (count, shapes, dtypes)."""
    if isinstance(model, TFLiteReference):
        return tflite_match_inputs(model, specs, label)
    ins = graph_inputs(model)
    if len(ins) != len(specs):
        raise TesseraError(
            f"{label} takes {len(ins)} inputs ({', '.join(vi.name for vi in ins) or 'none'}), the module "
            f"{len(specs)} ({', '.join(s.describe() for s in specs) or 'none'}); compare with the model the "
            "module was compiled from")
    for k, (vi, spec) in enumerate(zip(ins, specs)):
        shape, dtype = _declared(vi)
        if not _fits(shape, spec.shape) or (dtype is not None and dtype != spec.dtype):
            shown = "?" if shape is None else tuple("?" if d is None else d for d in shape)
            raise TesseraError(
                f"{label}: input {k} {vi.name!r} is declared {shown} {dtype}, the module's input {k} is "
                f"{spec.describe()}; the model compared with must declare the module's inputs")
    return named_like(model, specs)


def run_reference(model: Reference, label: str, values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's (or LiteRT's) outputs for `values` (given by input position)."""
    if isinstance(model, TFLiteReference):
        return run_tflite_reference(model, label, values)
    from ..testing.models import is_quantized, ort_run

    feed = {vi.name: value for vi, value in zip(graph_inputs(model), values)}
    try:
        # int8 models: compare with ONNX's definition, which tessera matches bit for bit (docs/quantization.md)
        return ort_run(model, feed, optimize=not is_quantized(model))
    except Exception as err:  # onnxruntime's error classes derive from Exception directly
        raise TesseraError(f"{label}: onnxruntime could not run it ({type(err).__name__}: {err})") from None


def check_outputs(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], label: str) -> None:
    if len(outputs) != len(expected):
        raise TesseraError(f"{label} has {len(expected)} outputs, the module {len(outputs)}; compare with the "
                           "model the module was compiled from")
    for k, (a, b) in enumerate(zip(outputs, expected)):
        if a.shape != b.shape:
            raise TesseraError(f"{label}: output {k} has shape {b.shape}, the module's {a.shape}; compare with "
                               "the model the module was compiled from")


# 16-bit float outputs: within two units in the last place (as ONNX's test runner allows bfloat16);
# onnxruntime rounds to float16 less often than each operator does (frontend/onnx/half.py)
NARROW_RTOL = {"float16": 2.0 ** -9, "bfloat16": 2.0 ** -6}


def compare(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float, atol: float,
            oracle: str = "onnxruntime") -> bool:
    """Print the largest difference per output; True when all are within tolerance."""
    ok = True
    for k, (a, b) in enumerate(zip(outputs, expected)):
        a64, b64 = a.astype(np.float64), np.asarray(b).astype(np.float64)  # (bfloat16 takes no part in NumPy math)
        diff = float(np.max(np.abs(a64 - b64))) if a.size else 0.0
        tol = max(rtol, NARROW_RTOL.get(a.dtype.name, 0.0))
        within = bool(np.allclose(a64, b64, rtol=tol, atol=atol))
        ok &= within
        print(f"output {k}: max |tessera - {oracle}| = {diff:.3g} "
              f"({'within' if within else 'OUTSIDE'} rtol={tol:g}, atol={atol:g})")
    return ok
