"""ONNX converters, one module per operator family (importing registers them)."""

from . import math, nn, tensor  # noqa: F401
