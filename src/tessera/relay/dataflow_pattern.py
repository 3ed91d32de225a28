"""A dataflow pattern language over Relay expressions.

    conv = is_op("nn.conv2d")(wildcard(), is_constant())
    bias = is_op("add")(conv, is_constant())
    pattern = bias.optional(lambda x: is_op("nn.relu")(x))      # relu or not
    pattern.match(expr)  -> Match | None   (bound sub-expressions by pattern)

Patterns are immutable values combined with `|` (alternatives), `.optional`,
`.has_attr({...})`, `.has_dtype`, `.has_shape` and `.check(predicate)`.
Matching is structural on the graph: a pattern node matches one expression
node; a pattern used twice must match the same expression both times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import TesseraError
from .expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from .op import REGISTRY, Op
from .ty import TensorType


class Pattern:
    """Base class; subclasses implement `_match_node`."""

    def __call__(self, *args: "Pattern") -> "CallPattern":
        return CallPattern(self, tuple(_as_pattern(a) for a in args))

    def __or__(self, other: "Pattern") -> "AltPattern":
        return AltPattern(self, other)

    def optional(self, wrap: Callable[["Pattern"], "Pattern"]) -> "AltPattern":
        """This pattern, or `wrap(this)` (e.g. with a trailing activation)."""
        return AltPattern(wrap(self), self)

    def has_attr(self, attrs: Mapping[str, Any]) -> "AttrPattern":
        return AttrPattern(self, tuple(sorted(attrs.items())))

    def has_dtype(self, dtype: str) -> "PredicatePattern":
        return self.check(lambda e: isinstance(e.checked_type_, TensorType) and e.checked_type_.dtype == dtype,
                          f"dtype {dtype}")

    def has_shape(self, shape: Sequence[int]) -> "PredicatePattern":
        want = tuple(shape)
        return self.check(lambda e: isinstance(e.checked_type_, TensorType) and e.checked_type_.shape == want,
                          f"shape {want}")

    def check(self, predicate: Callable[[Expr], bool], description: str = "predicate") -> "PredicatePattern":
        return PredicatePattern(self, predicate, description)

    def match(self, expr: Expr) -> Optional["Match"]:
        state = Match()
        return state if self._match(expr, state) else None

    def _match(self, expr: Expr, state: "Match") -> bool:
        bound = state.bindings.get(id(self))
        if bound is not None:
            return bound is expr
        snapshot = dict(state.bindings), dict(state.patterns)
        if self._match_node(expr, state):
            state.bindings[id(self)] = expr
            state.patterns[id(self)] = self
            return True
        state.bindings.clear()
        state.bindings.update(snapshot[0])
        state.patterns.clear()
        state.patterns.update(snapshot[1])
        return False

    def _match_node(self, expr: Expr, state: "Match") -> bool:
        raise NotImplementedError


@dataclass
class Match:
    """The expressions each pattern node matched (by pattern identity)."""

    bindings: dict[int, Expr] = field(default_factory=dict)
    patterns: dict[int, "Pattern"] = field(default_factory=dict)

    def matched(self) -> list[tuple["Pattern", Expr]]:
        """(pattern, expression) pairs of the successful match."""
        return [(self.patterns[k], e) for k, e in self.bindings.items()]

    def __getitem__(self, pattern: Pattern) -> Expr:
        return self.bindings[id(pattern)]

    def get(self, pattern: Pattern) -> Expr | None:
        return self.bindings.get(id(pattern))

    def call(self, pattern: Pattern) -> Call:
        """The call `pattern` matched; an error if it matched something else (a pattern table bug)."""
        expr = self[pattern]
        if not isinstance(expr, Call):
            raise TesseraError(f"{type(pattern).__name__} matched a {type(expr).__name__}, expected a Call")
        return expr


def _as_pattern(p: object) -> Pattern:
    if isinstance(p, Pattern):
        return p
    if isinstance(p, Expr):
        return ExprPattern(p)
    raise TesseraError(f"expected a Pattern, got {type(p).__name__}")


@dataclass(frozen=True, eq=False)
class WildcardPattern(Pattern):
    def _match_node(self, expr: Expr, state: Match) -> bool:
        return True


@dataclass(frozen=True, eq=False)
class ExprPattern(Pattern):
    expr: Expr

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return expr is self.expr


@dataclass(frozen=True, eq=False)
class ConstantPattern(Pattern):
    def _match_node(self, expr: Expr, state: Match) -> bool:
        return isinstance(expr, Constant)


@dataclass(frozen=True, eq=False)
class VarPattern(Pattern):
    name: str = ""

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return isinstance(expr, Var) and (not self.name or expr.name_hint == self.name)


@dataclass(frozen=True, eq=False)
class OpPattern(Pattern):
    """Matches an operator by name (the callee of a CallPattern)."""

    name: str
    op: Op = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", REGISTRY.get(self.name))  # unknown names fail here

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return expr is self.op


@dataclass(frozen=True, eq=False)
class CompositePattern(Pattern):
    """Matches a call of a composite function named `name` (from MergeComposite)."""

    name: str

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return isinstance(expr, Function) and expr.attrs.composite == self.name


@dataclass(frozen=True, eq=False)
class CallPattern(Pattern):
    op: Pattern
    args: tuple[Pattern, ...]

    def _match_node(self, expr: Expr, state: Match) -> bool:
        if not isinstance(expr, Call) or len(expr.args) != len(self.args):
            return False
        # the callee may be an Op, not an Expr; callee patterns only compare or bind it (OpPattern, wildcard,
        # CompositePattern after an isinstance). Typing `_match` wider would widen every `Match` look-up.
        if not self.op._match(expr.op, state):  # type: ignore[arg-type]
            return False
        return all(p._match(a, state) for p, a in zip(self.args, expr.args))


@dataclass(frozen=True, eq=False)
class TuplePattern(Pattern):
    fields: tuple[Pattern, ...]

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return (isinstance(expr, Tuple) and len(expr.fields) == len(self.fields)
                and all(p._match(f, state) for p, f in zip(self.fields, expr.fields)))


@dataclass(frozen=True, eq=False)
class TupleGetItemPattern(Pattern):
    tuple_value: Pattern
    index: int | None = None

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return (isinstance(expr, TupleGetItem) and (self.index is None or expr.index == self.index)
                and self.tuple_value._match(expr.tuple_value, state))


@dataclass(frozen=True, eq=False)
class AltPattern(Pattern):
    left: Pattern
    right: Pattern

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return self.left._match(expr, state) or self.right._match(expr, state)


@dataclass(frozen=True, eq=False)
class AttrPattern(Pattern):
    inner: Pattern
    attrs: tuple[tuple[str, Any], ...]

    def _match_node(self, expr: Expr, state: Match) -> bool:
        if not self.inner._match(expr, state) or not isinstance(expr, Call):
            return False
        for name, want in self.attrs:
            have = getattr(expr.attrs, name, _MISSING)
            if have is _MISSING:
                return False
            if isinstance(have, tuple) and isinstance(want, list):
                want = tuple(want)
            if have != want:
                return False
        return True


@dataclass(frozen=True, eq=False)
class PredicatePattern(Pattern):
    inner: Pattern
    predicate: Callable[[Expr], bool]
    description: str = "predicate"

    def _match_node(self, expr: Expr, state: Match) -> bool:
        return self.inner._match(expr, state) and bool(self.predicate(expr))


_MISSING = object()


# ------------------------------------------------------------- constructors
def wildcard() -> WildcardPattern:
    return WildcardPattern()


def is_constant() -> ConstantPattern:
    return ConstantPattern()


def is_var(name: str = "") -> VarPattern:
    return VarPattern(name)


def is_expr(expr: Expr) -> ExprPattern:
    return ExprPattern(expr)


def is_op(name: str) -> OpPattern:
    return OpPattern(name)


def is_composite(name: str) -> CompositePattern:
    return CompositePattern(name)


def is_tuple(fields: Sequence[Pattern]) -> TuplePattern:
    return TuplePattern(tuple(fields))


def is_tuple_get_item(tuple_value: Pattern, index: int | None = None) -> TupleGetItemPattern:
    return TupleGetItemPattern(tuple_value, index)
