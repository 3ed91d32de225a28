"""TargetKind: a registry entry describing one kind of target.

A kind has a name, a device type, typed attribute options with defaults,
default keys, and an attribute map for per-kind data: its hooks (see
`hooks.py`), its toolchain, its default code generator, pattern tables.

    TargetKind.register("mykind", device="cpu") \\
        .add_attr_option("mcpu", OptionType.STR, doc="CPU name") \\
        .set_attr(RELAY_TO_TIR, MyLowering())

Kinds are configured once, at registration; `Target`s built from them are
immutable values.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import did_you_mean, format_choices
from .errors import TargetError
from .hooks import HOOK_CONTRACTS

DEVICES = ("cpu", "ext_dev")


class OptionType(enum.Enum):
    STR = "str"
    INT = "int"
    BOOL = "bool"
    STR_LIST = "list of str"
    TARGET = "Target"
    TARGET_LIST = "list of Target"


@dataclass(frozen=True)
class AttrOption:
    name: str
    type: OptionType
    default: Any = None
    doc: str = ""
    choices: tuple[str, ...] | None = None


class TargetKind:
    def __init__(self, name: str, device: str = "cpu", accelerator: bool = False, doc: str = "") -> None:
        if device not in DEVICES:
            raise TargetError(f"target kind {name!r}: device {device!r} is not one of {format_choices(DEVICES)}")
        self.name = name
        self.device = device
        self.accelerator = accelerator
        self.doc = doc
        self.default_keys: tuple[str, ...] = (name,)
        self.options: dict[str, AttrOption] = {}
        self._attrs: dict[str, Any] = {}
        self.add_attr_option("keys", OptionType.STR_LIST, doc="keys used to pick schedules and strategies")

    # ------------------------------------------------------------ register
    @classmethod
    def register(cls, name: str, device: str = "cpu", accelerator: bool = False, doc: str = "") -> "TargetKind":
        """Create a kind and add it to the default registry."""
        return KINDS.add(cls(name, device, accelerator, doc))

    def add_attr_option(self, name: str, type: OptionType, default: Any = None, doc: str = "",
                        choices: tuple[str, ...] | list[str] | None = None) -> "TargetKind":
        if name in self.options and name != "keys":
            raise TargetError(f"target kind {self.name!r} already has an option {name!r}")
        self.options[name] = AttrOption(name, type, default, doc, tuple(choices) if choices else None)
        return self

    def set_default_keys(self, *keys: str) -> "TargetKind":
        self.default_keys = tuple(keys)
        return self

    def set_attr(self, key: str, value: Any) -> "TargetKind":
        contract = HOOK_CONTRACTS.get(key)
        if contract is not None:
            valid, description = contract
            if not valid(value):
                raise TargetError(
                    f"target kind {self.name!r}: hook {key} must be {description}, got {type(value).__name__}"
                )
        self._attrs[key] = value
        return self

    # --------------------------------------------------------------- query
    def get_attr(self, key: str, default: Any = None) -> Any:
        return self._attrs.get(key, default)

    def has_attr(self, key: str) -> bool:
        return key in self._attrs

    @property
    def attr_names(self) -> list[str]:
        return list(self._attrs)

    def option(self, name: str) -> AttrOption:
        try:
            return self.options[name]
        except KeyError:
            raise TargetError(
                f"target kind {self.name!r} has no attribute {name!r}{did_you_mean(name, self.options)}; "
                f"valid attributes: {format_choices(self.options)}"
            ) from None

    def __repr__(self) -> str:
        return f"TargetKind({self.name})"


class TargetKindRegistry:
    def __init__(self) -> None:
        self._kinds: dict[str, TargetKind] = {}

    def add(self, kind: TargetKind) -> TargetKind:
        if kind.name in self._kinds:
            raise TargetError(f"target kind {kind.name!r} is already registered")
        self._kinds[kind.name] = kind
        return kind

    def get(self, name: str) -> TargetKind:
        try:
            return self._kinds[name]
        except KeyError:
            from .tags import TAGS

            known = [*self._kinds, *TAGS.names()]
            raise TargetError(
                f"unknown target kind {name!r}{did_you_mean(name, known)}; "
                f"known kinds: {format_choices(self._kinds)}"
                + (f"; aliases: {format_choices(TAGS.names())}" if TAGS.names() else "")
            ) from None

    def remove(self, name: str) -> None:
        """Unregister a kind (tests use this to clean up after themselves)."""
        self.get(name)
        del self._kinds[name]

    def __contains__(self, name: str) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[TargetKind]:
        return iter(self._kinds.values())

    def names(self) -> list[str]:
        return list(self._kinds)


KINDS = TargetKindRegistry()
