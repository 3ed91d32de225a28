"""Target: an immutable, hashable description of what to compile for.

    Target("c")                                   the host CPU
    Target("c -mcpu=cortex-m7 -mfloat-abi=hard")  a Cortex-M7 with hard float
    Target({"kind": "c", "mcpu": "cortex-m7"})    the same, from a dict
    Target('{"kind": "c", "mcpu": "cortex-m7"}')  ... or from JSON
    Target("blas")                                a registered alias (tag)

Every attribute is checked against the kind's typed options; mistakes raise
`TargetError` naming the piece at fault and what would be valid. `str()`
gives a form that parses back to an equal target.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Union

from ..errors import did_you_mean, format_choices
from .errors import TargetError
from .kind import KINDS, AttrOption, OptionType, TargetKind

TargetLike = Union["Target", str, Mapping[str, Any]]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class Target:
    __slots__ = ("kind", "_attrs", "_key")

    kind: TargetKind
    _attrs: dict[str, Any]  # every option of the kind, defaults filled in
    _key: tuple[str, tuple[tuple[str, Any], ...]]  # what equality and hashing compare

    def __init__(self, spec: TargetLike) -> None:
        built = _build(spec, top_level=True)
        object.__setattr__(self, "kind", built.kind)
        object.__setattr__(self, "_attrs", built._attrs)
        object.__setattr__(self, "_key", built._key)

    @classmethod
    def _make(cls, kind: TargetKind, attrs: dict[str, Any]) -> "Target":
        self = object.__new__(cls)
        full = {name: opt.default for name, opt in kind.options.items()}
        full.update(attrs)
        if not full.get("keys"):
            full["keys"] = kind.default_keys
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "_attrs", full)
        object.__setattr__(self, "_key", (kind.name, tuple(sorted((k, v) for k, v in full.items()
                                                                   if v is not None))))
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Target is immutable; build a new one with with_attrs()")

    # --------------------------------------------------------------- access
    @property
    def attrs(self) -> Mapping[str, Any]:
        from types import MappingProxyType

        return MappingProxyType(self._attrs)

    def __getitem__(self, name: str) -> Any:
        self.kind.option(name)  # raises for unknown names
        return self._attrs.get(name)

    def get(self, name: str, default: Any = None) -> Any:
        value = self._attrs.get(name)
        return default if value is None else value

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._attrs.get("keys") or ())

    @property
    def is_composite(self) -> bool:
        return bool(self.accelerators)

    @property
    def host(self) -> "Target":
        """The target that runs the graph: itself, or a composite's host."""
        if self.kind.name == "composite":
            return self._attrs["host"]
        if self._attrs.get("accelerators"):
            return self.with_attrs(accelerators=None)
        return self

    @property
    def accelerators(self) -> tuple["Target", ...]:
        """Accelerator targets, in the order partitioning runs them."""
        accels = self._attrs.get("accelerators") or ()
        if self.kind.name == "composite":
            host_accels = self._attrs["host"].accelerators
            return tuple(host_accels) + tuple(accels)
        return tuple(accels)

    def with_attrs(self, **attrs: Any) -> "Target":
        merged = {k: v for k, v in self._attrs.items() if k != "keys" or v != self.kind.default_keys}
        for name, value in attrs.items():
            option = self.kind.option(name)
            merged[option.name] = None if value is None else _coerce(self.kind, option, value)
        return Target._make(self.kind, merged)

    # ----------------------------------------------------------- comparison
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    # -------------------------------------------------------------- printing
    def non_default_attrs(self) -> dict[str, Any]:
        result = {}
        for name, opt in self.kind.options.items():
            value = self._attrs.get(name)
            if name == "keys" and tuple(value or ()) == self.kind.default_keys:
                continue
            if value is not None and value != opt.default:
                result[name] = value
        return result

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.name}
        for name, value in self.non_default_attrs().items():
            out[name] = _to_json_value(value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def _is_bare(self) -> bool:
        return not self.non_default_attrs()

    def __str__(self) -> str:
        parts = [self.kind.name]
        for name, value in self.non_default_attrs().items():
            text = _to_text(value)
            if text is None:
                return self.to_json()  # nested targets with attributes need JSON
            if value is True:
                parts.append(f"-{name}")
            else:
                parts.append(f"-{name}={text}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"


# ------------------------------------------------------------------ values
def _to_json_value(value: Any) -> Any:
    if isinstance(value, Target):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_to_json_value(v) for v in value]
    return value


def _to_text(value: Any) -> str | None:
    """Command-line text for a value, or None when it has no such form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Target):
        return value.kind.name if value._is_bare() else None
    if isinstance(value, tuple):
        texts = [t for t in map(_to_text, value) if t is not None and "," not in t]
        if len(texts) != len(value):
            return None
        return ",".join(texts)
    text = str(value)
    if not text or any(c.isspace() for c in text) or text.startswith("{"):
        return None
    return text


def _type_error(kind: TargetKind, option: AttrOption, value: Any, expected: str) -> TargetError:
    return TargetError(
        f"target {kind.name!r}: attribute {option.name!r} expects {expected}, got {value!r}"
    )


def _coerce(kind: TargetKind, option: AttrOption, value: Any, from_text: bool = False) -> Any:
    """Check `value` against the option's type; parse it when it is text."""
    t = option.type
    if t is OptionType.STR:
        if not isinstance(value, str):
            raise _type_error(kind, option, value, "a string")
        if option.choices and value not in option.choices:
            raise TargetError(
                f"target {kind.name!r}: attribute {option.name!r} got {value!r}{did_you_mean(value, option.choices)}; "
                f"valid values: {format_choices(option.choices)}"
            )
        return value
    if t is OptionType.INT:
        if from_text and isinstance(value, str):
            try:
                return int(value, 0)
            except ValueError:
                raise _type_error(kind, option, value, "an integer") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(kind, option, value, "an integer")
        return value
    if t is OptionType.BOOL:
        if from_text and isinstance(value, str):
            if value.lower() in _TRUE:
                return True
            if value.lower() in _FALSE:
                return False
            raise _type_error(kind, option, value, "true or false")
        if not isinstance(value, bool):
            raise _type_error(kind, option, value, "true or false")
        return value
    if t is OptionType.STR_LIST:
        if from_text and isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise _type_error(kind, option, value, "a list of strings")
        return tuple(value)
    if t is OptionType.TARGET:
        return _build(value, top_level=False, where=f"attribute {option.name!r} of {kind.name!r}", for_nesting=True)
    if t is OptionType.TARGET_LIST:
        if from_text and isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise _type_error(kind, option, value, "a list of targets")
        return tuple(
            _build(v, top_level=False, where=f"attribute {option.name!r} of {kind.name!r}", for_nesting=True)
            for v in value
        )
    raise TargetError(f"unsupported option type {t}")


# ----------------------------------------------------------------- parsing
def _build(spec: Any, top_level: bool, where: str = "", for_nesting: bool = False) -> Target:
    if isinstance(spec, Target):
        target = spec
    elif isinstance(spec, Mapping):
        target = _from_dict(spec, where)
    elif isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as err:
                raise TargetError(f"malformed target JSON {spec!r}: {err.msg} at position {err.pos}") from None
            if not isinstance(data, dict):
                raise TargetError(f"target JSON must be an object, got {type(data).__name__}")
            target = _from_dict(data, where)
        else:
            target = _from_string(text, prefer_kind=for_nesting)
    else:
        raise TargetError(f"a target is a string, a dict or a Target; got {type(spec).__name__}")
    if target.kind.validate is not None:
        target.kind.validate(target)
    if top_level:
        _check_standalone(target)
    return target


def _check_standalone(target: Target) -> None:
    if target.kind.accelerator:
        raise TargetError(
            f"target kind {target.kind.name!r} is an accelerator and cannot be used alone; "
            f"add it to a host, e.g. 'c -accelerators={target.kind.name}'"
            + (f" or use the alias {target.kind.name!r}" if _has_tag(target.kind.name) else "")
        )
    for accel in target.accelerators:
        if not accel.kind.accelerator:
            raise TargetError(
                f"{accel.kind.name!r} is not an accelerator kind and cannot be listed in 'accelerators'; "
                f"accelerator kinds: {format_choices(k.name for k in KINDS if k.accelerator) or '(none registered)'}"
            )


def _has_tag(name: str) -> bool:
    from .tags import TAGS

    return name in TAGS


def _from_dict(data: Mapping[str, Any], where: str) -> Target:
    if "kind" not in data:
        raise TargetError(f"target dict {dict(data)!r} has no 'kind'{' (' + where + ')' if where else ''}")
    kind_name = data["kind"]
    if not isinstance(kind_name, str):
        raise TargetError(f"target 'kind' must be a string, got {kind_name!r}")
    kind = KINDS.get(kind_name)
    attrs = {}
    for name, value in data.items():
        if name == "kind":
            continue
        option = kind.option(name)
        attrs[option.name] = _coerce(kind, option, value)
    return Target._make(kind, attrs)


def _from_string(text: str, prefer_kind: bool = False) -> Target:
    from .tags import TAGS

    tokens = text.split()
    if not tokens:
        raise TargetError("empty target string; expected e.g. 'c' or 'c -mcpu=cortex-m7'")
    name, options = tokens[0], tokens[1:]
    if not _NAME.match(name):
        raise TargetError(f"malformed target string {text!r}: {name!r} is not a kind or alias name")
    if name not in TAGS and name not in KINDS:
        from .plugins import load_plugins

        load_plugins()  # the name may be an alias or kind of an installed package
    if name in TAGS and not (prefer_kind and name in KINDS):
        base = TAGS.get(name)
        return base.with_attrs(**_parse_options(base.kind, options, text)) if options else base
    kind = KINDS.get(name)
    return Target._make(kind, _parse_options(kind, options, text))


def _parse_options(kind: TargetKind, tokens: list[str], text: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for token in tokens:
        if not token.startswith("-") or token in ("-", "--"):
            raise TargetError(
                f"malformed target string {text!r}: expected '-name=value' or '-flag', got {token!r}"
            )
        body = token.lstrip("-")
        name, sep, value = body.partition("=")
        if not name:
            raise TargetError(f"malformed target string {text!r}: option {token!r} has no name")
        option = kind.option(name)
        if not sep:
            if option.type is not OptionType.BOOL:
                raise TargetError(f"target {kind.name!r}: attribute {name!r} needs a value ({token}=...)")
            attrs[name] = True
            continue
        if name in attrs:
            raise TargetError(f"target string {text!r} sets {name!r} twice")
        attrs[name] = _coerce(kind, option, value, from_text=True)
    return attrs
