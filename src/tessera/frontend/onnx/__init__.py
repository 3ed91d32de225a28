"""The ONNX importer: `from_onnx(model) -> (IRModule, params)`."""

from .importer import NeedsConstantError, from_onnx
from .registry import CONVERTERS, converter

__all__ = ["CONVERTERS", "NeedsConstantError", "converter", "from_onnx"]
