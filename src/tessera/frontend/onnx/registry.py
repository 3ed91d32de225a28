"""ONNX converters by op type and opset version.

    @converter("Relu", since=1)
    def relu(node: Node, ctx: ImportContext) -> Expr: ...

A converter is chosen by the highest `since` that does not exceed the
model's opset for the node's domain; several registrations of one op type
cover the opset changes of that operator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, Union

from ...errors import UnsupportedOperatorError, format_choices

if TYPE_CHECKING:
    from ...relay.expr import Expr
    from .importer import ImportContext, Node

ConverterResult = Union["Expr", list["Expr"], tuple["Expr", ...]]
Converter = Callable[["Node", "ImportContext"], ConverterResult]
ConverterT = TypeVar("ConverterT", bound=Converter)  # registering keeps a converter's own signature

DEFAULT_DOMAIN = ""

# The newest opset of each domain whose operator changes the converters
# follow: ONNX 1.23's node tests reach opset 28 and pass. A model importing a
# newer opset is refused (frontend/onnx/validate.py), not guessed at.
HIGHEST_OPSET: dict[str, int] = {DEFAULT_DOMAIN: 28, "com.microsoft": 1}


@dataclass(frozen=True)
class _Entry:
    since: int
    fn: Converter


class ConverterRegistry:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], list[_Entry]] = {}

    def register(self, op_type: str, since: int = 1,
                 domain: str = DEFAULT_DOMAIN) -> Callable[[ConverterT], ConverterT]:
        def wrap(fn: ConverterT) -> ConverterT:
            entries = self._entries.setdefault((domain, op_type), [])
            if any(e.since == since for e in entries):
                raise ValueError(f"converter for {op_type} since opset {since} registered twice")
            entries.append(_Entry(since, fn))
            entries.sort(key=lambda e: e.since)
            return fn

        return wrap

    def lookup(self, op_type: str, opset: int, domain: str, node_name: str) -> Converter:
        entries = self._entries.get((domain, op_type))
        if not entries:
            where = f"domain {domain!r}, " if domain else ""
            raise UnsupportedOperatorError(
                f"node {node_name!r}: operator {op_type} ({where}opset {opset}) is not supported by tessera. "
                f"Supported operators: {format_choices(self.op_types(domain))}"
            )
        usable = [e for e in entries if e.since <= opset]
        if not usable:
            raise UnsupportedOperatorError(
                f"node {node_name!r}: operator {op_type} is supported from opset {entries[0].since}, "
                f"the model uses opset {opset}"
            )
        return usable[-1].fn

    def op_types(self, domain: str = DEFAULT_DOMAIN) -> list[str]:
        return sorted(op for d, op in self._entries if d == domain)

    def versions(self, op_type: str, domain: str = DEFAULT_DOMAIN) -> tuple[int, ...]:
        """The opsets from which the op type's converters apply, oldest first (empty when unsupported).

        The first is the oldest opset imported; each converter serves up to the next one, the last up
        to HIGHEST_OPSET of the domain.
        """
        return tuple(e.since for e in self._entries.get((domain, op_type), ()))

    def domains(self) -> set[str]:
        return {domain for domain, _ in self._entries}

    def supports(self, op_type: str, domain: str = DEFAULT_DOMAIN) -> bool:
        return (domain, op_type) in self._entries


CONVERTERS = ConverterRegistry()
converter = CONVERTERS.register
