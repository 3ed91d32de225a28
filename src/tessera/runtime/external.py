"""External runtime modules: partitions compiled by a RelayToRuntime hook.

An external module owns some functions of the graph (by global symbol) and
runs them itself — e.g. by handing an ONNX model to onnxruntime. The graph
executor calls `get_function(symbol)(inputs, outputs)` with NumPy views of
its storage. Constants a module owns (reported by the UpdateConstants hook)
are stored once, next to the module, and handed back with
`bind_constants` when a library is loaded.

Subclasses register a loader by `type_key` so an exported library can
rebuild them: `register_external_module(MyModule)`. An exported library
also names the Python module that defines each type (`provider`), so a
fresh process that only loads the library imports that module itself.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import numpy as np

from ..errors import RuntimeExecutionError, format_choices

ExternalFunction = Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], None]


class ExternalModule(ABC):
    type_key: ClassVar[str] = ""

    @abstractmethod
    def function_names(self) -> list[str]:
        """Global symbols this module implements."""

    @abstractmethod
    def get_function(self, name: str) -> ExternalFunction:
        """A callable writing the outputs of `name` from its inputs."""

    def bind_constants(self, constants: Mapping[str, np.ndarray]) -> None:
        """Receive the constants UpdateConstants said this module owns."""

    def run_dynamic(self, name: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run `name` and return its outputs, whose shapes may depend on the data (an output stage)."""
        raise RuntimeExecutionError(f"{type(self).__name__} cannot run {name!r} as an output stage "
                                    "(outputs of data-dependent shape)")

    @abstractmethod
    def save(self) -> bytes:
        """Serialise everything but the bound constants."""

    @classmethod
    @abstractmethod
    def load(cls, data: bytes) -> "ExternalModule":
        """Inverse of `save`."""


_LOADERS: dict[str, type[ExternalModule]] = {}


def register_external_module(cls: type[ExternalModule]) -> type[ExternalModule]:
    if not cls.type_key:
        raise ValueError(f"{cls.__name__} needs a type_key")
    _LOADERS[cls.type_key] = cls
    return cls


def provider_of(module: ExternalModule) -> str:
    """The Python module whose import registers `module`'s loader."""
    return type(module).__module__


def load_external(type_key: str, data: bytes, provider: str | None = None) -> ExternalModule:
    if type_key not in _LOADERS and provider is not None:
        # the library was written with this module loaded; the .so itself is already trusted code
        try:
            importlib.import_module(provider)
        except ImportError as exc:
            raise RuntimeExecutionError(
                f"library holds an external module of type {type_key!r}, defined in {provider!r}, which "
                f"cannot be imported here ({exc}); install the package that provides it"
            ) from None
    if type_key not in _LOADERS:
        raise RuntimeExecutionError(
            f"library holds an external module of type {type_key!r}, but no loader is registered for it "
            f"(import the target that provides it); known: {format_choices(_LOADERS) or 'none'}"
        )
    return _LOADERS[type_key].load(data)
