"""A TFLite model as the reference of `tessera run --check`: LiteRT runs it.

The counterpart of the ONNX functions in `reference.py`, which dispatch here
when the reference is a TFLite model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import TesseraError
from .inputs import InputSpec


@dataclass(frozen=True)
class TFLiteReference:
    data: bytes
    input_names: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[np.dtype, ...]


def load_tflite_reference(source: str | bytes, label: str) -> TFLiteReference:
    from ..testing.litert import interpreter

    try:
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
        details = interpreter(data).get_input_details()
    except Exception as err:  # LiteRT raises ValueError / RuntimeError, reading OSError
        raise TesseraError(f"{label}: cannot read it as a TFLite model ({type(err).__name__}: {err})") from None
    return TFLiteReference(data, tuple(str(d["name"]) for d in details),
                           tuple(tuple(int(n) for n in d["shape"]) for d in details),
                           tuple(np.dtype(d["dtype"]) for d in details))


def tflite_named_like(model: TFLiteReference, specs: Sequence[InputSpec]) -> list[InputSpec]:
    if len(model.input_names) != len(specs):
        return list(specs)
    return [replace(spec, names=(name,) + tuple(n for n in spec.names if n != name))
            for name, spec in zip(model.input_names, specs)]


def tflite_match_inputs(model: TFLiteReference, specs: Sequence[InputSpec], label: str) -> list[InputSpec]:
    if len(model.input_names) != len(specs):
        raise TesseraError(f"{label} takes {len(model.input_names)} inputs, the module {len(specs)}; compare "
                           "with the model the module was compiled from")
    for k, (shape, dtype, spec) in enumerate(zip(model.input_shapes, model.input_dtypes, specs)):
        if shape != spec.shape or dtype != spec.dtype:
            raise TesseraError(f"{label}: input {k} is {shape} {dtype}, the module's input {k} is "
                               f"{spec.describe()}; the model compared with must declare the module's inputs")
    return tflite_named_like(model, specs)


def run_tflite_reference(model: TFLiteReference, label: str, values: Sequence[np.ndarray]) -> list[np.ndarray]:
    from ..testing.litert import run_litert

    try:
        return run_litert(model.data, values)
    except Exception as err:
        raise TesseraError(f"{label}: LiteRT could not run it ({type(err).__name__}: {err})") from None
