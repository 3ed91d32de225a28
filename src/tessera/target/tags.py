"""Tags (aliases): a name that stands for a whole target description.

    register_tag("blas", {"kind": "c", "accelerators": [{"kind": "blas"}]})
    Target("blas")   # the host C target with the blas accelerator
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import format_choices
from .errors import TargetError

if TYPE_CHECKING:
    from .target import Target


class TagRegistry:
    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}
        self._docs: dict[str, str] = {}

    def register(self, name: str, spec: Mapping[str, Any] | str, doc: str = "") -> None:
        if name in self._specs and (self._specs[name], self._docs[name]) != (spec, doc):
            # the same alias again (a re-imported module) is fine; another meaning is not
            raise TargetError(f"target alias {name!r} is already registered as {self._specs[name]!r}")
        self._specs[name] = spec
        self._docs[name] = doc

    def get(self, name: str) -> Target:
        from .target import Target

        _load_builtins()
        if name not in self._specs:
            raise TargetError(f"unknown target alias {name!r}; aliases: {format_choices(self._specs)}")
        return Target(self._specs[name])

    def remove(self, name: str) -> None:
        self._specs.pop(name)
        self._docs.pop(name, None)

    def __contains__(self, name: str) -> bool:
        _load_builtins()
        return name in self._specs

    def names(self) -> list[str]:
        _load_builtins()
        return list(self._specs)

    def doc(self, name: str) -> str:
        return self._docs.get(name, "")


def _load_builtins() -> None:
    """tessera's own aliases (`blas`, `onnxruntime`) are registered by modules loaded on first use."""
    from .plugins import load_builtin_kinds

    load_builtin_kinds()


TAGS = TagRegistry()


def register_tag(name: str, spec: Mapping[str, Any] | str, doc: str = "") -> None:
    TAGS.register(name, spec, doc)
