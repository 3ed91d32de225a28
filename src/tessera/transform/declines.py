"""Why a call stayed on the host: the partitioning passes note each refusal.

MergeComposite notes a match whose entry's check said no (or whose inner
values are read outside it); AnnotateTarget notes an operator call no
accelerator takes. The notes ride on the module, in `mod.attrs[DECLINED_ATTR]`,
through every later pass, so a report can say, for a call that ended up
in a host kernel, which check of which target turned it down:

    for note in declined(lib.partitioned_mod):
        print(note.target, note.op, note.signature, note.kind, note.reason)

Calls are rebuilt by every pass, so a note names its call by operator and
argument types (`call_signature`), not by identity: calls that look alike
to a check get the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from ..op.registry import Op
from ..relay.expr import Call, Expr
from ..relay.module import IRModule
from ..relay.ty import TensorType, TupleType, Type

DECLINED_ATTR = "partition.declined"


class Refusal(Enum):
    """Which decision left a call behind."""

    CHECK = "a pattern entry's check refused the match"
    SHARED_VALUE = "a value inside the match is read outside it"
    RULE = "the target's operator rule refused the call"
    NO_RULE = "no pattern or operator rule of the target takes the operator"
    PINNED = "pinned to the host"

    @property
    def matched_a_pattern(self) -> bool:
        """A pattern matched the call: a more specific answer than NO_RULE for the same call."""
        return self in (Refusal.CHECK, Refusal.SHARED_VALUE)


@dataclass(frozen=True, slots=True)
class Declined:
    """One accelerator's refusal of one kind of call."""

    target: str  # the accelerator kind that did not take it
    op: str  # the operator's name
    signature: str  # its argument types (see `call_signature`)
    kind: Refusal
    reason: str  # for people, e.g. "pattern blas.conv2d: its check _conv_ok refused the match"


def call_signature(call: Call) -> str:
    """The argument types of a call, as text: "(1x64x56x56 float32, 128x64x1x1 float32)"."""
    return "(" + ", ".join(type_text(a) for a in call.args) + ")"


def type_text(e: Expr) -> str:
    """An expression's type in a few characters: "1x64x56x56 float32", "(2 float32, 2 int64)"."""
    return describe_type(e.checked_type_)


def describe_type(ty: Type | None) -> str:
    if isinstance(ty, TensorType):
        return f"{'x'.join(str(d) for d in ty.shape) or 'scalar'} {ty.dtype}"
    if isinstance(ty, TupleType):
        return "(" + ", ".join(describe_type(f) for f in ty.fields) + ")"
    return "?" if ty is None else str(ty)


def op_calls(nodes: Iterable[Expr]) -> list[Call]:
    return [n for n in nodes if isinstance(n, Call) and isinstance(n.op, Op)]


def note(target: str, calls: Iterable[Call], kind: Refusal, reason: str) -> list[Declined]:
    return [Declined(target, c.op.name, call_signature(c), kind, reason) for c in calls if isinstance(c.op, Op)]


def callable_name(fn: Callable[..., object]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def declined(mod: IRModule) -> tuple[Declined, ...]:
    notes = mod.attrs.get(DECLINED_ATTR, ())
    return tuple(notes) if isinstance(notes, tuple) else ()


def with_declined(mod: IRModule, notes: Iterable[Declined]) -> IRModule:
    """`mod` with `notes` added to the ones it carries (each kept once, in order)."""
    new = tuple(dict.fromkeys([*declined(mod), *notes]))
    return mod if len(new) == len(declined(mod)) else mod.with_attrs(**{DECLINED_ATTR: new})
