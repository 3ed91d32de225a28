"""TFLite operator converters, one module per operator family (importing them registers them)."""

from . import activation, conv, elemwise, pool, quantize, softmax, tensor

__all__ = ["activation", "conv", "elemwise", "pool", "quantize", "softmax", "tensor"]
