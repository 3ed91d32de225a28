"""tessera: a deep-learning compiler — ONNX to Relay to TIR to C.

    import tessera
    mod, params = tessera.frontend.from_onnx(onnx_model)
    lib = tessera.build(mod, target="c", params=params)
    outputs = lib(input_array)

`import tessera` loads only the runtime: a process that loads and runs an
exported library (`tessera.load_module("model.so")`) never imports the
compiler. `tessera.build` and the subpackages (`tessera.frontend`,
`tessera.relay`, ...) are imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import TesseraError
from .runtime import GraphModule, load_module
from .util.version import __version__

if TYPE_CHECKING:
    from .backend.build_module import build

# name -> module that defines it, imported when the name is first read
_LAZY_NAMES = {"build": "tessera.backend.build_module"}
_SUBPACKAGES = frozenset({
    "backend", "cli", "codegen", "contrib", "crt", "dtype", "errors", "frontend", "micro", "op", "relay",
    "runtime", "target", "te", "testing", "tir", "transform", "tune", "util",
})

__all__ = ["GraphModule", "TesseraError", "__version__", "build", "load_module"]


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
        globals()[name] = value  # later reads skip this hook
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_NAMES, *_SUBPACKAGES})
