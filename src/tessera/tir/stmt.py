"""TIR statements and the PrimFunc that holds them.

Loops always run from 0 to `extent`; a schedule that needs an offset folds it
into the index expressions. That keeps loop nests regular for gcc's
vectoriser and for the memory planner's liveness walk.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Union

from .buffer import Buffer
from .expr import PrimExpr, Var


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"  # a hint to the C compiler: no dependences across iterations
    UNROLLED = "unrolled"


class Stmt:
    __slots__ = ()


@dataclass(frozen=True, eq=False, slots=True)
class For(Stmt):
    loop_var: Var
    extent: PrimExpr
    body: Stmt
    kind: ForKind = ForKind.SERIAL


@dataclass(frozen=True, eq=False, slots=True)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, slots=True)
class BufferStore(Stmt):
    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]


@dataclass(frozen=True, eq=False, slots=True)
class IfThenElse(Stmt):
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Allocate(Stmt):
    """Scratch memory for `buffer`, alive while `body` runs."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, slots=True)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, eq=False, slots=True)
class Evaluate(Stmt):
    """Evaluate an expression for its side effect (e.g. an extern call)."""

    value: PrimExpr


@dataclass(frozen=True, eq=False, slots=True)
class Return(Stmt):
    """Leave the function with a status code (0 is success)."""

    value: PrimExpr


def seq(*stmts: Stmt | None) -> Stmt:
    """A statement sequence, flattened, with empty parts dropped."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


# PrimFunc attribute: indices of parameters the memory planner may place over another
# parameter of the same call; code generators must not promise `restrict` for them.
MAY_ALIAS_ATTR = "may_alias"


def _frozen(attrs: Mapping[str, object] | None) -> Mapping[str, object]:
    return MappingProxyType(dict(attrs or {}))


@dataclass(frozen=True, eq=False, slots=True)
class PrimFunc:
    """A kernel: buffer parameters (inputs, then outputs) and a body."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    num_inputs: int
    attrs: Mapping[str, object] = field(default_factory=lambda: _frozen(None))

    def __post_init__(self) -> None:
        object.__setattr__(self, "attrs", _frozen(self.attrs))
        if not 0 <= self.num_inputs <= len(self.params):
            raise ValueError(f"num_inputs {self.num_inputs} out of range for {len(self.params)} params")

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self.params[: self.num_inputs]

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self.params[self.num_inputs :]

    def with_attrs(self, **attrs: object) -> "PrimFunc":
        merged = dict(self.attrs)
        merged.update(attrs)
        return PrimFunc(self.name, self.params, self.body, self.num_inputs, merged)

    def with_name(self, name: str) -> "PrimFunc":
        return PrimFunc(name, self.params, self.body, self.num_inputs, self.attrs)


Node = Union[Stmt, PrimExpr]


def walk_stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement under `stmt`, pre-order."""
    stack = [stmt]
    while stack:
        s = stack.pop()
        yield s
        if isinstance(s, (For, Allocate, LetStmt)):
            stack.append(s.body)
        elif isinstance(s, SeqStmt):
            stack.extend(reversed(s.stmts))
        elif isinstance(s, IfThenElse):
            if s.else_case is not None:
                stack.append(s.else_case)
            stack.append(s.then_case)
