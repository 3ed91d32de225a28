"""Model importers."""

from .onnx import from_onnx
from .tflite import from_tflite

__all__ = ["from_onnx", "from_tflite"]
