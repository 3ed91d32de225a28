"""IRModule: the unit every pass transforms — Relay functions and PrimFuncs.

The module holds every definition for every target until code generation;
passes return new modules instead of editing one in place.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Union

from ..errors import TesseraError, did_you_mean
from ..tir.stmt import PrimFunc
from .expr import Function, GlobalVar

BaseFunc = Union[Function, PrimFunc]


class IRModule:
    def __init__(
        self,
        functions: Mapping[GlobalVar, BaseFunc] | None = None,
        attrs: Mapping[str, object] | None = None,
    ) -> None:
        self._functions: dict[GlobalVar, BaseFunc] = dict(functions or {})
        names = [gv.name_hint for gv in self._functions]
        if len(set(names)) != len(names):
            raise TesseraError(f"duplicate global names in module: {sorted(names)}")
        self._by_name = {gv.name_hint: gv for gv in self._functions}
        self.attrs: Mapping[str, object] = MappingProxyType(dict(attrs or {}))

    @classmethod
    def from_expr(cls, func: Function, name: str = "main") -> "IRModule":
        return cls({GlobalVar(name): func})

    # -------------------------------------------------------------- lookups
    @property
    def functions(self) -> Mapping[GlobalVar, BaseFunc]:
        return MappingProxyType(self._functions)

    def get_global_var(self, name: str) -> GlobalVar:
        try:
            return self._by_name[name]
        except KeyError:
            raise TesseraError(
                f"no function named {name!r} in module{did_you_mean(name, self._by_name)}"
            ) from None

    def __getitem__(self, key: str | GlobalVar) -> BaseFunc:
        gv = self.get_global_var(key) if isinstance(key, str) else key
        return self._functions[gv]

    def __contains__(self, key: str | GlobalVar) -> bool:
        if isinstance(key, str):
            return key in self._by_name
        return key in self._functions

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(self._functions)

    def items(self) -> Iterator[tuple[GlobalVar, BaseFunc]]:
        return iter(self._functions.items())

    @property
    def main(self) -> Function:
        func = self["main"]
        if not isinstance(func, Function):
            raise TesseraError("module's main is not a Relay function")
        return func

    def unique_name(self, hint: str) -> str:
        if hint not in self._by_name:
            return hint
        k = 1
        while f"{hint}_{k}" in self._by_name:
            k += 1
        return f"{hint}_{k}"

    # ------------------------------------------------------ functional edits
    def with_function(self, gv: GlobalVar | str, func: BaseFunc) -> "IRModule":
        """A module with `gv` (an existing one, or a new name) bound to `func`."""
        functions = dict(self._functions)
        if isinstance(gv, str):
            gv = self._by_name.get(gv) or GlobalVar(gv)
        functions[gv] = func
        return IRModule(functions, self.attrs)

    def without(self, gv: GlobalVar) -> "IRModule":
        functions = {k: v for k, v in self._functions.items() if k != gv}
        return IRModule(functions, self.attrs)

    def with_attrs(self, **attrs: object) -> "IRModule":
        merged = dict(self.attrs)
        merged.update(attrs)
        return IRModule(self._functions, merged)

    def __str__(self) -> str:
        from .printer import module_str

        return module_str(self)

    def __repr__(self) -> str:
        return f"IRModule({', '.join(gv.name_hint for gv in self._functions)})"
