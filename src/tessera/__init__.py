"""tessera: a deep-learning compiler — ONNX to Relay to TIR to C.

    import tessera
    mod, params = tessera.frontend.from_onnx(onnx_model)
    lib = tessera.build(mod, target="c", params=params)
    outputs = lib(input_array)
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import op  # noqa: F401  (registers operators)
from . import contrib  # noqa: F401  (registers the library targets and their aliases)
from .backend.build_module import build
from .errors import TesseraError
from .runtime import GraphModule, load_module

__all__ = ["GraphModule", "TesseraError", "__version__", "build", "load_module"]
