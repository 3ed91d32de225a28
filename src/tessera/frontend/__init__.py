"""Model importers."""

from .onnx import from_onnx

__all__ = ["from_onnx"]
