"""The model formats the commands accept, told apart by file suffix: .onnx and .tflite.

One place decides what a model file is (`model_format`), imports it
(`import_model`) and names its oracle for --check (onnxruntime, LiteRT), so
every subcommand takes the same files and refuses the same others.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TesseraError

if TYPE_CHECKING:
    import numpy as np

    from ..relay.module import IRModule


class ModelFormat(enum.Enum):
    ONNX = ".onnx"
    TFLITE = ".tflite"

    @property
    def oracle(self) -> str:
        """What --check compares with."""
        return "onnxruntime" if self is ModelFormat.ONNX else "LiteRT"


MODEL_SUFFIXES = tuple(f.value for f in ModelFormat)
TFLITE_IDENTIFIER = b"TFL3"  # bytes 4..8 of a TFLite flatbuffer


def is_model_file(path: str) -> bool:
    return Path(path).suffix in MODEL_SUFFIXES


def model_format(path: str) -> ModelFormat:
    """The format of the model file `path`, from its suffix; any other suffix is refused."""
    suffix = Path(path).suffix
    for fmt in ModelFormat:
        if suffix == fmt.value:
            return fmt
    raise TesseraError(f"{path}: tessera compiles ONNX (.onnx) and TFLite (.tflite) models; "
                       f"got {'suffix ' + repr(suffix) if suffix else 'no suffix'}")


def embedded_format(source: str | bytes) -> ModelFormat:
    """The format of a model given as a path, or as the bytes embedded in a Model Library Format export."""
    if isinstance(source, bytes):
        return ModelFormat.TFLITE if source[4:8] == TFLITE_IDENTIFIER else ModelFormat.ONNX
    return ModelFormat.TFLITE if Path(source).suffix == ModelFormat.TFLITE.value else ModelFormat.ONNX


def import_model(path: str, shapes: Mapping[str, Sequence[int]],
                 opaque_unsupported: bool = False) -> tuple[IRModule, dict[str, np.ndarray]]:
    """`from_onnx` or `from_tflite`, by the file's suffix."""
    fmt = model_format(path)
    if fmt is ModelFormat.TFLITE:
        from ..frontend import from_tflite

        if shapes:
            raise TesseraError(f"--input-shape: {path} is a TFLite model, whose input shapes are fixed in the file")
        return from_tflite(path)
    from ..frontend import from_onnx

    return from_onnx(path, shape=dict(shapes) or None, opaque_unsupported=opaque_unsupported)
