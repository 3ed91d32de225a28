"""Named sub-targets: one compilation over several named pieces.

    config = parse_named_targets("low_power_cpu: c -mcpu=cortex-m0; inference_cpu: c -mcpu=cortex-m7")
    config.host_name        -> "low_power_cpu"   (the first piece, unless host= says otherwise)
    config["inference_cpu"] -> Target("c -mcpu=cortex-m7")

Pieces are keyed by the user's names, not by kind or device, so two pieces
of the same kind (two Cortex-M cores) can live in one compilation. Call
sites are later pinned to a piece by its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeGuard

from ..errors import did_you_mean, format_choices
from .errors import TargetError
from .target import Target, TargetLike

_PIECE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # it names folders of the MLF export (codegen/<piece>)


@dataclass(frozen=True)
class CompilationConfig:
    """The named pieces of a compilation and which one is the host."""

    pieces: Mapping[str, Target]
    host_name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "pieces", MappingProxyType(dict(self.pieces)))
        for name in self.pieces:
            if not isinstance(name, str) or not _PIECE_NAME.fullmatch(name):
                raise TargetError(f"named targets: {name!r} is not a valid piece name (letters, digits, underscore)")
        if not self.pieces:
            raise TargetError("a compilation configuration needs at least one piece")
        if self.host_name not in self.pieces:
            raise TargetError(
                f"host piece {self.host_name!r} is not defined{did_you_mean(self.host_name, self.pieces)}; "
                f"pieces: {format_choices(self.pieces)}"
            )
        host = self.pieces[self.host_name]
        if host.kind.device != "cpu":
            raise TargetError(f"host piece {self.host_name!r} must be a CPU target, got {host}")

    @property
    def host(self) -> Target:
        return self.pieces[self.host_name]

    def __getitem__(self, name: str) -> Target:
        try:
            return self.pieces[name]
        except KeyError:
            raise TargetError(
                f"no target piece named {name!r}{did_you_mean(name, self.pieces)}; "
                f"pieces: {format_choices(self.pieces)}"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name in self.pieces

    def __iter__(self) -> Iterator[str]:
        return iter(self.pieces)

    def __str__(self) -> str:
        return "; ".join(f"{name}: {target}" for name, target in self.pieces.items())

    @classmethod
    def single(cls, target: TargetLike, name: str = "host") -> "CompilationConfig":
        return cls({name: Target(target)}, name)


_NAMED_SPEC = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*:")


def is_named_targets(spec: object) -> TypeGuard[str | CompilationConfig]:
    """Does `spec` describe named pieces ("name: target; ...") rather than one target?"""
    return isinstance(spec, CompilationConfig) or (isinstance(spec, str) and bool(_NAMED_SPEC.match(spec)))


def parse_named_targets(spec: str | Mapping[str, TargetLike] | CompilationConfig,
                        host: str | None = None) -> CompilationConfig:
    """Parse `"name: target; name: target"` (or a dict name -> target)."""
    if isinstance(spec, CompilationConfig):
        return spec
    if isinstance(spec, Mapping):
        items = list(spec.items())
    else:
        if not isinstance(spec, str) or not spec.strip():
            raise TargetError("named targets: expected 'name: target; name: target', got an empty description")
        items = []
        for part in spec.split(";"):
            if not part.strip():
                continue
            name, sep, target_text = part.partition(":")
            if not sep:
                raise TargetError(
                    f"named targets: piece {part.strip()!r} has no name; write it as 'name: {part.strip()}'"
                )
            items.append((name.strip(), target_text.strip()))
    pieces: dict[str, Target] = {}
    for name, target in items:
        if not isinstance(name, str) or not _PIECE_NAME.fullmatch(name):
            raise TargetError(f"named targets: {name!r} is not a valid piece name (letters, digits, underscore)")
        if name in pieces:
            raise TargetError(f"named targets: piece name {name!r} is used twice")
        try:
            pieces[name] = Target(target)
        except TargetError as err:
            raise TargetError(f"named targets: piece {name!r}: {err}") from None
    if not pieces:
        raise TargetError("named targets: no pieces given")
    return CompilationConfig(pieces, host if host is not None else next(iter(pieces)))
