"""ONNX converters, one module per operator family (importing registers them)."""

from . import math, math_activation, nn, tensor  # noqa: F401
from . import tensor_index, tensor_resize  # noqa: F401
from . import normalization, reduction  # noqa: F401
from . import quantize  # noqa: F401
from . import recurrent  # noqa: F401
from . import einsum  # noqa: F401
