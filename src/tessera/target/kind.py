"""TargetKind: a registry entry describing one kind of target.

A kind has a name, a device type, typed attribute options with defaults,
default keys, and a fixed set of typed fields (`hooks.FIELDS`): its four
hooks, its toolchain, its default code generator, what it takes from the
graph. Each field is checked when it is set, with an error naming the kind,
the field and what it must be.

    TargetKind.register("mykind", device="cpu") \\
        .add_attr_option("mcpu", OptionType.STR, doc="CPU name") \\
        .set_toolchain(my_toolchain) \\
        .set_attr(RELAY_TO_TIR, MyLowering())

Kinds are configured once, at registration; `Target`s built from them are
immutable values. Every kind remembers where it was registered (`origin`),
so `tessera targets` can say so and a name clash names both sides.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

from ..errors import did_you_mean, format_choices
from ..relay.pattern_table import PatternEntry
from .errors import TargetError
from .hooks import (
    ALL_HOOKS, FIELD_BY_HOOK, FIELD_BY_NAME, Codegen, RelayToRuntime, RelayToTIR, SupportedOps, SupportsOp,
    TIRToRuntime, ToolchainFor, UpdateConstants, Validate, check_field,
)
from .origin import Origin, caller_origin

if TYPE_CHECKING:
    from .target import Target
    from .toolchain import Toolchain

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


def host_c_toolchain(target: "Target") -> "Toolchain":
    """The default toolchain: the host's gcc, as the `c` kind uses it without -mcpu."""
    from .builtin import c_toolchain

    return c_toolchain(target)


class TargetKind:
    # The typed contract (documented in hooks.FIELDS); None means "not provided".
    relay_to_tir: RelayToTIR | None
    tir_to_runtime: TIRToRuntime | None
    relay_to_runtime: RelayToRuntime | None
    update_constants: UpdateConstants | None
    toolchain: ToolchainFor
    validate: Validate | None
    codegen: Codegen | None
    pattern_table: tuple[PatternEntry, ...]
    supported_ops: SupportedOps
    bind_constants: bool
    supports_op: SupportsOp | None

    def __init__(self, name: str, device: str = "cpu", accelerator: bool = False, doc: str = "",
                 origin: Origin | None = None) -> None:
        if device not in DEVICES:
            raise TargetError(f"target kind {name!r}: device {device!r} is not one of {format_choices(DEVICES)}")
        self.name = name
        self.device = device
        self.accelerator = accelerator
        self.doc = doc
        self.origin = origin or Origin("(unknown)", 0)
        self.default_keys: tuple[str, ...] = (name,)
        self.options: dict[str, AttrOption] = {}
        self.relay_to_tir = None
        self.tir_to_runtime = None
        self.relay_to_runtime = None
        self.update_constants = None
        self.toolchain = host_c_toolchain
        self.validate = None
        self.codegen = None
        self.pattern_table = ()
        self.supported_ops = {}
        self.bind_constants = False
        self.supports_op = None
        self.add_attr_option("keys", OptionType.STR_LIST, doc="keys used to pick schedules and strategies")

    # ------------------------------------------------------------ register
    @classmethod
    def register(cls, name: str, device: str = "cpu", accelerator: bool = False, doc: str = "") -> "TargetKind":
        """Create a kind and add it to the default registry (see `TargetKindRegistry.add`)."""
        return KINDS.add(cls(name, device, accelerator, doc, caller_origin(sys._getframe(1))))

    def add_attr_option(self, name: str, type: OptionType, default: Any = None, doc: str = "",
                        choices: tuple[str, ...] | list[str] | None = None) -> "TargetKind":
        if name in self.options and name != "keys":
            raise TargetError(f"target kind {self.name!r} already has an option {name!r}")
        self.options[name] = AttrOption(name, type, default, doc, tuple(choices) if choices else None)
        return self

    def set_default_keys(self, *keys: str) -> "TargetKind":
        self.default_keys = tuple(keys)
        return self

    @overload
    def set_attr(self, key: Literal["RelayToTIR"], value: RelayToTIR) -> "TargetKind": ...
    @overload
    def set_attr(self, key: Literal["TIRToRuntime"], value: TIRToRuntime) -> "TargetKind": ...
    @overload
    def set_attr(self, key: Literal["RelayToRuntime"], value: RelayToRuntime) -> "TargetKind": ...
    @overload
    def set_attr(self, key: Literal["UpdateConstants"], value: UpdateConstants) -> "TargetKind": ...

    def set_attr(self, key: str, value: object) -> "TargetKind":
        """Set one of the four hooks by its TVM name (RELAY_TO_TIR, ...)."""
        spec = FIELD_BY_HOOK.get(key)
        if spec is None:
            setter = f"; per-kind data has its own setter: set_{key}(...)" if key in FIELD_BY_NAME else ""
            raise TargetError(f"target kind {self.name!r}: unknown hook {key!r}{did_you_mean(key, ALL_HOOKS)}; "
                              f"hooks: {', '.join(ALL_HOOKS)}{setter}")
        return self._set(spec.name, value)

    def set_toolchain(self, toolchain: ToolchainFor) -> "TargetKind":
        return self._set("toolchain", toolchain)

    def set_validate(self, validate: Validate) -> "TargetKind":
        return self._set("validate", validate)

    def set_codegen(self, codegen: Codegen) -> "TargetKind":
        return self._set("codegen", codegen)

    def set_pattern_table(self, table: Sequence[PatternEntry]) -> "TargetKind":
        return self._set("pattern_table", table, tuple(table) if isinstance(table, Sequence) else table)

    def set_supported_ops(self, ops: SupportedOps) -> "TargetKind":
        return self._set("supported_ops", ops, dict(ops) if isinstance(ops, Mapping) else ops)

    def set_bind_constants(self, bind: bool) -> "TargetKind":
        return self._set("bind_constants", bind)

    def set_supports_op(self, rule: SupportsOp) -> "TargetKind":
        return self._set("supports_op", rule)

    def _set(self, name: str, value: object, stored: object = None) -> "TargetKind":
        problem = check_field(name, value)
        if problem is not None:
            spec = FIELD_BY_NAME[name]
            label = f"hook {spec.hook}" if spec.hook else f"field {name!r}"
            raise TargetError(f"target kind {self.name!r}: {label} must be {spec.expects}; "
                              f"got {type(value).__name__} ({problem})")
        setattr(self, name, value if stored is None else stored)
        return self

    # --------------------------------------------------------------- query
    def provided_fields(self) -> list[str]:
        """The contract fields this kind set itself (not left at their defaults)."""
        fresh = TargetKind(self.name)
        return [name for name in FIELD_BY_NAME if getattr(self, name) != getattr(fresh, name)]

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
        self.loaded_entry_points: set[tuple[str, str]] = set()  # (distribution, name), loaded once each

    def add(self, kind: TargetKind) -> TargetKind:
        """Register `kind`. The same registration run again (a module re-imported, as a
        notebook does) replaces the old entry; another kind under a taken name is an error."""
        if not kind.origin.built_in:
            _load_builtins()  # so a name tessera's own kinds take clashes here, not at a later look-up
        old = self._kinds.get(kind.name)
        if old is not None and old.origin.site != kind.origin.site:
            raise TargetError(
                f"target kind {kind.name!r} is already registered by {old.origin}; {kind.origin} registers "
                "a different kind under the same name. Choose another name."
            )
        self._kinds[kind.name] = kind
        return kind

    def get(self, name: str) -> TargetKind:
        _load_builtins()
        if name not in self._kinds:
            from .plugins import load_plugins

            load_plugins()  # a kind from an installed package is registered on first use
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
        _load_builtins()
        return name in self._kinds

    def __iter__(self) -> Iterator[TargetKind]:
        _load_builtins()
        return iter(list(self._kinds.values()))

    def names(self) -> list[str]:
        _load_builtins()
        return list(self._kinds)


def _load_builtins() -> None:
    """tessera's kinds registered above this layer (`c`, `blas`, `onnxruntime`) load on first use."""
    from .plugins import load_builtin_kinds

    load_builtin_kinds()


KINDS = TargetKindRegistry()
