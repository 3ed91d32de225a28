"""TFLite converters by builtin operator name.

    @converter("CONV_2D")
    def conv_2d(op: Operator) -> Value: ...

TFLite versions an operator's kernel, not its semantics (a newer version
adds input types), so one converter covers every version; what it does not
handle it refuses by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, Union

from ...errors import UnsupportedOperatorError, format_choices

if TYPE_CHECKING:
    from .importer import Operator, Value

ConverterResult = Union["Value", list["Value"]]
Converter = Callable[["Operator"], ConverterResult]
ConverterT = TypeVar("ConverterT", bound=Converter)


class ConverterRegistry:
    def __init__(self) -> None:
        self._converters: dict[str, Converter] = {}

    def register(self, *op_names: str) -> Callable[[ConverterT], ConverterT]:
        def wrap(fn: ConverterT) -> ConverterT:
            for name in op_names:
                if name in self._converters:
                    raise ValueError(f"converter for {name} registered twice")
                self._converters[name] = fn
            return fn

        return wrap

    def lookup(self, op_name: str, where: str) -> Converter:
        fn = self._converters.get(op_name)
        if fn is None:
            raise UnsupportedOperatorError(f"{where}: TFLite operator {op_name} is not supported by tessera. "
                                           f"Supported operators: {format_choices(self.op_names())}")
        return fn

    def op_names(self) -> list[str]:
        return sorted(self._converters)

    def supports(self, op_name: str) -> bool:
        return op_name in self._converters


CONVERTERS = ConverterRegistry()
converter = CONVERTERS.register
