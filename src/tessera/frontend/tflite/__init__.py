"""The TFLite importer: `from_tflite(path) -> (IRModule, params)`."""

from .importer import from_tflite
from .registry import CONVERTERS, converter

__all__ = ["CONVERTERS", "converter", "from_tflite"]
