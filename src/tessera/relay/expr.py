"""Relay expressions: the dataflow graph of a model.

Nodes are immutable and compare by identity (a graph shares sub-expressions,
and `Var` is a binding site); `structural.py` provides structural equality
and hashing. Every node may carry the type `InferType` checked for it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar, Optional, TypeVar, Union

import numpy as np

from ..errors import TypeInferenceError
from .op import Op
from .ty import TensorType, Type


class Expr:
    """Base class of Relay expressions."""

    __slots__ = ()
    checked_type_: Optional[Type]
    # Every concrete node is a dataclass; saying so lets `dataclasses.replace` take any Expr.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def checked_type(self) -> Type:
        if self.checked_type_ is None:
            raise TypeInferenceError(
                f"{type(self).__name__} has no type yet; run InferType first"
            )
        return self.checked_type_

    @property
    def tensor_type(self) -> TensorType:
        """`checked_type`, which must be a tensor's (not a tuple's or a function's)."""
        ty = self.checked_type
        if not isinstance(ty, TensorType):
            raise TypeInferenceError(f"{type(self).__name__} has type {ty}, expected a tensor type")
        return ty

    def with_type(self, ty: Type) -> "Expr":
        return replace(self, checked_type_=ty)


_var_ids = itertools.count()


@dataclass(frozen=True, eq=False, slots=True)
class Var(Expr):
    name_hint: str
    type_annotation: Optional[Type] = None
    checked_type_: Optional[Type] = None

    def __post_init__(self) -> None:
        if self.checked_type_ is None and self.type_annotation is not None:
            object.__setattr__(self, "checked_type_", self.type_annotation)


@dataclass(frozen=True, slots=True)
class GlobalVar(Expr):
    """Names a function of an IRModule; equal when the names are equal."""

    name_hint: str
    checked_type_: Optional[Type] = field(default=None, compare=False)


@dataclass(frozen=True, eq=False, slots=True)
class Constant(Expr):
    data: np.ndarray
    checked_type_: Optional[Type] = None

    def __post_init__(self) -> None:
        data = self.data
        if not (isinstance(data, np.ndarray) and not data.flags.writeable and data.flags.c_contiguous):
            data = np.array(data, order="C")  # own a contiguous copy nobody else can change
            data.setflags(write=False)
        object.__setattr__(self, "data", data)
        if self.checked_type_ is None:
            object.__setattr__(self, "checked_type_", TensorType(data.shape, data.dtype.name))


@dataclass(frozen=True, eq=False, slots=True)
class Tuple(Expr):
    fields: tuple[Expr, ...]
    checked_type_: Optional[Type] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True, eq=False, slots=True)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    checked_type_: Optional[Type] = None


@dataclass(frozen=True, slots=True)
class FuncAttrs:
    """What passes record on a function. Typed fields, not a string map."""

    primitive: bool = False  # a fused kernel: lowered as one unit
    compiler: Optional[str] = None  # target kind that owns this partition
    global_symbol: Optional[str] = None  # the exported name of the kernel
    composite: Optional[str] = None  # pattern name, for MergeComposite results
    target: Optional[object] = None  # a tessera.target.Target once assigned
    extra: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    def with_(self, **changes: Any) -> "FuncAttrs":
        return replace(self, **changes)


@dataclass(frozen=True, eq=False, slots=True)
class Function(Expr):
    params: tuple[Var, ...]
    body: Expr
    ret_type: Optional[Type] = None
    attrs: FuncAttrs = FuncAttrs()
    checked_type_: Optional[Type] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))



CallTarget = Union[Op, Function, GlobalVar]
AttrsT = TypeVar("AttrsT")


@dataclass(frozen=True, eq=False, slots=True)
class Call(Expr):
    op: CallTarget
    args: tuple[Expr, ...]
    attrs: object = None  # the op's attribute dataclass, or None
    checked_type_: Optional[Type] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))

    def attrs_as(self, kind: type[AttrsT]) -> AttrsT:
        """`attrs`, checked to be the op's attribute class `kind`."""
        if not isinstance(self.attrs, kind):
            callee = getattr(self.op, "name", type(self.op).__name__)
            raise TypeError(f"a call of {callee} has attributes {self.attrs!r}, expected {kind.__name__}")
        return self.attrs


@dataclass(frozen=True, eq=False, slots=True)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr
    checked_type_: Optional[Type] = None


def const(value: object, dtype: str | None = None) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def children(e: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions, in evaluation order (a called Function first)."""
    if isinstance(e, Call):
        head = (e.op,) if isinstance(e.op, (Function, GlobalVar)) else ()
        return head + e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, Function):
        return e.params + (e.body,)
    if isinstance(e, Let):
        return (e.var, e.value, e.body)
    return ()
