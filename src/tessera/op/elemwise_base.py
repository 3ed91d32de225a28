"""Builders that turn a scalar rule into a registered elementwise operator.

`unary`, `binary` and `unary_with_attrs` derive an op's type relation, NumPy
reference and TE compute from a scalar rule and its NumPy twin, so each
operator is declared in one line (see elemwise.py, elemwise_activation.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtype as dt
from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, broadcast_indices, broadcast_shapes, tensors
from .registry import Op, OpPattern, Validate, register_op
from .schedule_context import ScheduleContext

UnaryRule = Callable[[E.PrimExpr], E.PrimExpr]
BinaryRule = Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]
AttrsRule = Callable[[E.PrimExpr, Any], E.PrimExpr]
UnaryRef = Callable[[np.ndarray], np.ndarray]
BinaryRef = Callable[[np.ndarray, np.ndarray], np.ndarray]
AttrsRef = Callable[[np.ndarray, Any], np.ndarray]
Checks = Callable[[list[te.Tensor]], tuple[te.Check, ...]]  # a compute's operand checks

# Which dtypes an op accepts: a predicate and its description for errors.
DTypeClass = tuple[Callable[[str], bool], str]
FLOAT: DTypeClass = (dt.is_float, "a float dtype (float32, float64)")
NUMERIC: DTypeClass = (lambda d: d != "bool", "a numeric dtype")
SIGNED: DTypeClass = (lambda d: dt.is_float(d) or dt.info(d).kind == "int", "a signed dtype")
INTEGER: DTypeClass = (dt.is_int, "an integer dtype")
BOOL: DTypeClass = (dt.is_bool, "bool")
ANY: DTypeClass = (lambda d: True, "any dtype")


def check_dtype(op_name: str, d: str, allowed: DTypeClass, what: str = "input") -> None:
    predicate, description = allowed
    if not predicate(d):
        raise TypeInferenceError(f"{op_name}: {what} has dtype {d}, expected {description}")


def kernel_name(op_name: str) -> str:
    return op_name.split(".")[-1]


def elementwise(x: te.Tensor, out: TensorType, rule: UnaryRule, name: str) -> te.Tensor:
    return te.compute(x.shape, lambda *i: E.cast(rule(x[i]), out.dtype), name=name)


def unary(
    name: str,
    rule: UnaryRule,
    reference: UnaryRef,
    allowed: DTypeClass = FLOAT,
    out_dtype: str | None = None,
) -> Op:
    """An op applying `rule` to every element (output dtype: `out_dtype` or the input's)."""

    def type_rel(types: tuple[Type, ...], attrs: object) -> Type:
        x = as_tensor(types[0])
        check_dtype(name, x.dtype, allowed)
        return TensorType(x.shape, out_dtype or x.dtype)

    def ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(reference(args[0])).astype(out_dtype or args[0].dtype)

    def compute(inputs: list[te.Tensor], attrs: object, out: TensorType, sched: ScheduleContext) -> te.Tensor:
        return elementwise(inputs[0], out, rule, kernel_name(name))

    return register_op(name, type_rel=type_rel, reference=ref, pattern=OpPattern.ELEMWISE,
                       compute=compute, num_inputs=1)


def unary_with_attrs(
    name: str,
    attrs_type: type,
    rule: AttrsRule,
    reference: AttrsRef,
    allowed: DTypeClass = FLOAT,
    out_dtype: str | None = None,
) -> Op:
    """Like `unary`, for rules that read scalar attributes (`rule(x, attrs)`)."""

    def type_rel(types: tuple[Type, ...], attrs: object) -> Type:
        x = as_tensor(types[0])
        check_dtype(name, x.dtype, allowed)
        return TensorType(x.shape, out_dtype or x.dtype)

    def ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(reference(args[0], attrs)).astype(out_dtype or args[0].dtype)

    def compute(inputs: list[te.Tensor], attrs: object, out: TensorType, sched: ScheduleContext) -> te.Tensor:
        return elementwise(inputs[0], out, lambda v: rule(v, attrs), kernel_name(name))

    return register_op(name, type_rel=type_rel, reference=ref, pattern=OpPattern.ELEMWISE,
                       compute=compute, attrs=attrs_type, num_inputs=1)


def broadcast_compute(inputs: list[te.Tensor], out: TensorType, rule: Callable[..., E.PrimExpr],
                      name: str, checks: tuple[te.Check, ...] = ()) -> te.Tensor:
    """out[i] = rule(*(t[i broadcast to t] for t in inputs))."""

    def element(*i: E.Var) -> E.PrimExpr:
        return E.cast(rule(*(t[broadcast_indices(i, t.shape)] for t in inputs)), out.dtype)

    return te.compute(out.shape, element, name=name, checks=checks)


def binary(
    name: str,
    rule: BinaryRule,
    reference: BinaryRef,
    allowed: DTypeClass = NUMERIC,
    out_dtype: str | None = None,
    checks: Checks | None = None,
    validate: Validate | None = None,
) -> Op:
    """A broadcasting op on two operands of one dtype; `checks` and `validate`
    guard operand values (see te.Check and Op.validate)."""

    def type_rel(types: tuple[Type, ...], attrs: object) -> Type:
        a, b = tensors(types)
        if a.dtype != b.dtype:
            raise TypeInferenceError(f"{name} operands must share a dtype, got {a.dtype} and {b.dtype}")
        check_dtype(name, a.dtype, allowed)
        return TensorType(broadcast_shapes(a.shape, b.shape), out_dtype or a.dtype)

    def ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
        if validate is not None:
            validate([a.shape for a in args], list(args), attrs)
        with np.errstate(all="ignore"):
            return np.asarray(reference(args[0], args[1])).astype(out_dtype or args[0].dtype)

    def compute(inputs: list[te.Tensor], attrs: object, out: TensorType, sched: ScheduleContext) -> te.Tensor:
        return broadcast_compute(inputs, out, rule, kernel_name(name), checks(inputs) if checks else ())

    return register_op(name, type_rel=type_rel, reference=ref, pattern=OpPattern.BROADCAST,
                       compute=compute, num_inputs=2, validate=validate)


def same_type(types: tuple[Type, ...], attrs: object) -> Type:
    return as_tensor(types[0])


def attr_scalar(value: float, like: np.ndarray) -> np.generic:
    """A float attribute as a scalar of `like`'s dtype (keeps NumPy in that precision)."""
    return like.dtype.type(value)
