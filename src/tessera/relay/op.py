"""Operators as the graph IR sees them: the `Op` object a `Call` names, and the registry of ops.

An op carries everything the pipeline needs about it, next to each other:
its attribute type, type relation (shape/dtype inference), NumPy reference,
fusion pattern, TE compute (its lowering to loops) and, for ops whose
operands' values have a contract (indices in range, divisors not zero), the
check of operands known at compile time. Passes key their tables on the
`Op` object, never on its name; the name is for printing and for
user-facing look-ups (patterns, error messages).

The type lives here, with the graph IR, because calls, patterns and the
printer need it; the operators themselves are defined and registered in
`tessera.op`, which imports this module.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Optional, Union

import numpy as np

from ..errors import TesseraError, TypeInferenceError, did_you_mean
from .ty import Type

Array = np.ndarray


class OpPattern(enum.IntEnum):
    """How an op composes under fusion (the order matters: lower fuses more)."""

    ELEMWISE = 0  # out[i] = f(in[i])
    BROADCAST = 1  # elementwise with broadcasting
    INJECTIVE = 2  # each output element reads one input element (reshape, transpose)
    COMM_REDUCE = 3  # a commutative reduction (sum, max)
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output can take an elementwise epilogue (conv)
    TUPLE = 7
    OPAQUE = 8  # never fused


TypeRelation = Callable[[tuple[Type, ...], Any], Type]
Reference = Callable[[list[Array], Any], Union[Array, tuple[Array, ...]]]
# (inputs: list[te.Tensor], attrs, out_type, sched: ScheduleContext) -> te.Tensor | tuple of them.
# Spelled out as `tessera.op.registry.Compute`: the schedule context lives above the graph IR.
AnyCompute = Callable[..., Any]
# (input shapes, input values where known else None, attrs) -> None; raises InvalidValueError
Validate = Callable[[list[tuple[int, ...]], list[Optional[Array]], Any], None]


@dataclass(frozen=True, eq=False, slots=True)
class Op:
    name: str
    type_rel: TypeRelation
    reference: Reference
    pattern: OpPattern
    compute: Optional[AnyCompute] = None
    attrs_type: Optional[type] = None
    num_inputs: Optional[int] = None  # None: variadic
    doc: str = ""
    foldable: bool = True  # False: FoldConstant keeps calls on constants (e.g. int8 weights to dequantize)
    validate: Optional[Validate] = None  # refuses operand values the op has no meaning for

    def __call__(self, *args: object, **attrs: object) -> Any:
        """Build a call: `conv2d(x, w, strides=(2, 2))`."""
        from .expr import Call, Constant, Expr  # expr refers to Op: imported when a call is built

        exprs = tuple(a if isinstance(a, Expr) else Constant(np.asarray(a)) for a in args)
        return Call(self, exprs, self.make_attrs(**attrs))

    def make_attrs(self, **attrs: object) -> object:
        if self.attrs_type is None:
            if attrs:
                raise TesseraError(f"operator {self.name} takes no attributes, got {sorted(attrs)}")
            return None
        valid = {f.name for f in fields(self.attrs_type)}
        for key in attrs:
            if key not in valid:
                raise TesseraError(
                    f"operator {self.name} has no attribute {key!r}{did_you_mean(key, valid)}; "
                    f"valid: {', '.join(sorted(valid))}"
                )
        return self.attrs_type(**attrs)

    def check_arity(self, n: int) -> None:
        if self.num_inputs is not None and n != self.num_inputs:
            raise TypeInferenceError(f"{self.name} takes {self.num_inputs} inputs, got {n}")

    def __repr__(self) -> str:
        return f"Op({self.name})"


class OpRegistry:
    """Ops by name; `get` explains misspellings."""

    def __init__(self) -> None:
        self._ops: dict[str, Op] = {}

    def register(self, op: Op) -> Op:
        if op.name in self._ops:
            raise TesseraError(f"operator {op.name!r} is already registered")
        if op.attrs_type is not None and not is_dataclass(op.attrs_type):
            raise TesseraError(f"attributes of {op.name} must be a dataclass")
        self._ops[op.name] = op
        return op

    def get(self, name: str) -> Op:
        try:
            return self._ops[name]
        except KeyError:
            raise TesseraError(f"unknown operator {name!r}{did_you_mean(name, self._ops)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._ops

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops.values())

    def names(self) -> list[str]:
        return sorted(self._ops)


# Filled by `tessera.op` as its modules are imported (each registers its own operators).
REGISTRY = OpRegistry()


def attrs_as_dict(attrs: object) -> dict[str, object]:
    """An op's attributes as a dict (for printing and hashing)."""
    if attrs is None:
        return {}
    if not is_dataclass(attrs):
        raise TypeError(f"op attributes must be a dataclass, got {type(attrs).__name__}")
    return {f.name: getattr(attrs, f.name) for f in fields(attrs)}
