"""Elementwise and broadcasting operators: math, arithmetic, comparisons, casts.

Unary and binary ops are declared one line each from a scalar rule and its
NumPy twin (builders in elemwise_base.py, the rules with C's undefined cases
pinned down in elemwise_rules.py). Activations live in elemwise_activation.py
and are re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from .. import te
from ..crt.status import Status
from ..errors import InvalidValueError, TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from . import elemwise_rules as R
from ._util import as_tensor, broadcast_shapes, tensors
from .elemwise_activation import (  # noqa: F401  (re-exported)
    celu,
    clip,
    elu,
    gelu,
    hard_sigmoid,
    hard_swish,
    leaky_relu,
    mish,
    prelu,
    relu,
    selu,
    shrink,
    silu,
    softplus,
    softsign,
    thresholded_relu,
)
from .elemwise_base import (
    ANY,
    BOOL,
    FLOAT,
    INTEGER,
    NUMERIC,
    SIGNED,
    binary,
    broadcast_compute,
    check_dtype,
    unary,
    unary_with_attrs,
)
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


def _intrinsic(fn: E.Intrinsic) -> R.UnaryRule:
    return lambda x: E.call(fn, [x], x.dtype)


def _predicate(fn: E.Intrinsic) -> R.UnaryRule:
    return lambda x: E.call(fn, [x], "bool")


def _sign(x: E.PrimExpr) -> E.PrimExpr:
    zero, one = E.const(0, x.dtype), E.const(1, x.dtype)
    if dt.is_unsigned(x.dtype):
        return E.select(E.gt(x, zero), one, zero)
    rest = x if dt.is_float(x.dtype) else zero  # keeps NaN (and the sign of zero)
    return E.select(E.gt(x, zero), one, E.select(E.lt(x, zero), E.const(-1, x.dtype), rest))


def _abs(x: E.PrimExpr) -> E.PrimExpr:
    if dt.is_float(x.dtype):
        return E.call(E.Intrinsic.FABS, [x], x.dtype)
    if dt.is_unsigned(x.dtype):
        return x
    return E.call(E.Intrinsic.ABS, [x], x.dtype)


def _bitnot(x: E.PrimExpr) -> E.PrimExpr:
    """x ^ all-ones: gcc -Wall warns on `~` of a value it can see came from a comparison."""
    ones = -1 if R.is_signed_int(x.dtype) else dt.max_value(x.dtype)
    return E.binary(E.BinOp.BITXOR, x, E.const(ones, x.dtype))


def _reciprocal(x: E.PrimExpr) -> E.PrimExpr:
    return E.div(E.const(1, x.dtype), x)


# --------------------------------------------------------------- unary math
exp = unary("exp", _intrinsic(E.Intrinsic.EXP), np.exp)
log = unary("log", _intrinsic(E.Intrinsic.LOG), np.log)
sqrt = unary("sqrt", _intrinsic(E.Intrinsic.SQRT), np.sqrt)
erf = unary("erf", _intrinsic(E.Intrinsic.ERF), R.np_erf)
tanh = unary("tanh", _intrinsic(E.Intrinsic.TANH), np.tanh)
sin = unary("sin", _intrinsic(E.Intrinsic.SIN), np.sin)
cos = unary("cos", _intrinsic(E.Intrinsic.COS), np.cos)
tan = unary("tan", _intrinsic(E.Intrinsic.TAN), np.tan)
asin = unary("asin", _intrinsic(E.Intrinsic.ASIN), np.arcsin)
acos = unary("acos", _intrinsic(E.Intrinsic.ACOS), np.arccos)
atan = unary("atan", _intrinsic(E.Intrinsic.ATAN), np.arctan)
sinh = unary("sinh", _intrinsic(E.Intrinsic.SINH), np.sinh)
cosh = unary("cosh", _intrinsic(E.Intrinsic.COSH), np.cosh)
asinh = unary("asinh", _intrinsic(E.Intrinsic.ASINH), np.arcsinh)
acosh = unary("acosh", _intrinsic(E.Intrinsic.ACOSH), np.arccosh)
atanh = unary("atanh", _intrinsic(E.Intrinsic.ATANH), np.arctanh)
floor = unary("floor", _intrinsic(E.Intrinsic.FLOOR), np.floor)
ceil = unary("ceil", _intrinsic(E.Intrinsic.CEIL), np.ceil)
round = unary("round", _intrinsic(E.Intrinsic.ROUND), np.rint)
sigmoid = unary("sigmoid", R.sigmoid, R.np_sigmoid)
reciprocal = unary("reciprocal", _reciprocal, np.reciprocal)
negative = unary("negative", R.wrapping_unary(R.negate), np.negative, SIGNED)
abs = unary("abs", _abs, np.abs, NUMERIC)
sign = unary("sign", _sign, np.sign, NUMERIC)
logical_not = unary("logical_not", E.logical_not, np.logical_not, BOOL)
bitwise_not = unary("bitwise_not", R.wrapping_unary(_bitnot), np.invert, INTEGER)
isnan = unary("isnan", _predicate(E.Intrinsic.ISNAN), np.isnan, FLOAT, "bool")

# ----------------------------------------------------- binary, broadcasting
def _nonzero_divisor(inputs: list[te.Tensor]) -> tuple[te.Check, ...]:
    """Integer division and modulo test every divisor element once (not per output element)."""
    b = inputs[1]
    if dt.is_float(b.dtype):
        return ()
    return (te.check(b.shape, lambda *i: E.ne(b[i], E.const(0, b.dtype)), Status.DIVIDE_BY_ZERO),)


def _nonzero_divisor_values(shapes: list[tuple[int, ...]], values: list[np.ndarray | None], attrs: object) -> None:
    b = values[1]
    if b is not None and b.dtype.kind in "iu" and not np.all(b != 0):
        raise InvalidValueError("integer division by zero (a divisor is 0)")


add = binary("add", R.wrapping(E.add), np.add)
subtract = binary("subtract", R.wrapping(E.sub), np.subtract)
multiply = binary("multiply", R.wrapping(E.mul), np.multiply)
# integers truncate, as C and ONNX do; an integer divisor of 0 is an error (ONNX leaves it undefined)
divide = binary("divide", R.divide, R.np_divide, checks=_nonzero_divisor, validate=_nonzero_divisor_values)
floor_mod = binary("floor_mod", R.floor_mod, R.np_floor_mod, checks=_nonzero_divisor,
                   validate=_nonzero_divisor_values)
trunc_mod = binary("trunc_mod", R.trunc_mod, R.np_trunc_mod, checks=_nonzero_divisor,
                   validate=_nonzero_divisor_values)
maximum = binary("maximum", R.maximum, np.maximum)
minimum = binary("minimum", R.minimum, np.minimum)
equal = binary("equal", E.eq, np.equal, ANY, "bool")
not_equal = binary("not_equal", E.ne, np.not_equal, ANY, "bool")
less = binary("less", E.lt, np.less, NUMERIC, "bool")
less_equal = binary("less_equal", E.le, np.less_equal, NUMERIC, "bool")
greater = binary("greater", E.gt, np.greater, NUMERIC, "bool")
greater_equal = binary("greater_equal", E.ge, np.greater_equal, NUMERIC, "bool")
# Bitwise on 0/1 values, not && and ||: gcc 12's loop vectorizer (-O3 -march=x86-64-v3) miscompiles
# a short-circuit of a bool load and an int64 comparison in some loop nests (found by the fuzzer).
logical_and = binary("logical_and", lambda a, b: E.binary(E.BinOp.BITAND, a, b), np.logical_and, BOOL)
logical_or = binary("logical_or", lambda a, b: E.binary(E.BinOp.BITOR, a, b), np.logical_or, BOOL)
logical_xor = binary("logical_xor", E.ne, np.logical_xor, BOOL)
bitwise_and = binary("bitwise_and", lambda a, b: E.binary(E.BinOp.BITAND, a, b), np.bitwise_and, INTEGER)
bitwise_or = binary("bitwise_or", lambda a, b: E.binary(E.BinOp.BITOR, a, b), np.bitwise_or, INTEGER)
bitwise_xor = binary("bitwise_xor", lambda a, b: E.binary(E.BinOp.BITXOR, a, b), np.bitwise_xor, INTEGER)
left_shift = binary("left_shift", R.shift_left, R.np_shift_left, INTEGER)
right_shift = binary("right_shift", R.shift_right, R.np_shift_right, INTEGER)


# ------------------------------------------------- power: mixed operand types
def _power_dtype(base: str, exponent: str) -> str:
    """The dtype `power` computes in: integer pow for two integers, else a float."""
    if dt.is_float(base):
        return base
    return "float64" if dt.is_float(exponent) else base


def _power_type(types: tuple[Type, ...], attrs: object) -> Type:
    base, exponent = tensors(types)
    check_dtype("power", base.dtype, NUMERIC, "the base")
    check_dtype("power", exponent.dtype, NUMERIC, "the exponent")
    return TensorType(broadcast_shapes(base.shape, exponent.shape), base.dtype)


def _power_rule(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    base_dtype = a.dtype
    work = _power_dtype(a.dtype, b.dtype)
    a, b = E.cast(a, work), R.cast(b, work)
    value = E.binary(E.BinOp.POW, a, b) if dt.is_float(work) else R.int_power(a, b)
    return R.cast(value, base_dtype)


def _power_compute(inputs: list[te.Tensor], attrs: object, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    return broadcast_compute(inputs, out, _power_rule, "power")


def _power_ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
    a, b = args
    work = _power_dtype(a.dtype.name, b.dtype.name)
    a, b = a.astype(work), R.np_cast(b, work)
    with np.errstate(all="ignore"):
        value = np.power(a, b) if dt.is_float(work) else R.np_int_power(a, b)
    return R.np_cast(value, args[0].dtype.name)


power = register_op(
    "power", type_rel=_power_type, reference=_power_ref, pattern=OpPattern.BROADCAST,
    compute=_power_compute, num_inputs=2,
    doc="base ** exponent; the operands may differ in dtype, the result has the base's",
)


# ------------------------------------------------- ops with scalar attributes
@dataclass(frozen=True)
class CastAttrs:
    dtype: str


def _cast_type(types: tuple[Type, ...], attrs: CastAttrs) -> Type:
    x = as_tensor(types[0])
    dt.info(attrs.dtype)
    return TensorType(x.shape, attrs.dtype)


cast = register_op(
    "cast", type_rel=_cast_type,
    reference=lambda args, a: R.np_cast(args[0], a.dtype),
    pattern=OpPattern.ELEMWISE,
    compute=lambda inputs, a, out, sched: te.compute(
        inputs[0].shape, lambda *i: R.cast(inputs[0][i], a.dtype), name="cast"),
    attrs=CastAttrs, num_inputs=1,
    doc="convert to `dtype`; float -> integer saturates, NaN -> 0",
)


@dataclass(frozen=True)
class IsInfAttrs:
    detect_positive: bool = True
    detect_negative: bool = True


def _isinf_rule(x: E.PrimExpr, attrs: IsInfAttrs) -> E.PrimExpr:
    if attrs.detect_positive and attrs.detect_negative:
        return E.call(E.Intrinsic.ISINF, [x], "bool")
    if attrs.detect_positive:
        return E.eq(x, E.const(math.inf, x.dtype))
    if attrs.detect_negative:
        return E.eq(x, E.const(-math.inf, x.dtype))
    return E.const(0, "bool")


def _isinf_ref(x: np.ndarray, attrs: IsInfAttrs) -> np.ndarray:
    return np.isinf(x) & (((x > 0) & attrs.detect_positive) | ((x < 0) & attrs.detect_negative))


isinf = unary_with_attrs("isinf", IsInfAttrs, _isinf_rule, _isinf_ref, FLOAT, "bool")


# -------------------------------------------------------------------- where
def _where_type(types: tuple[Type, ...], attrs: object) -> Type:
    c, a, b = tensors(types)
    if c.dtype != "bool":
        raise TypeInferenceError(f"where's condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise TypeInferenceError(f"where's branches must share a dtype, got {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shapes(c.shape, a.shape, b.shape), a.dtype)


def _where_rule(c: E.PrimExpr, a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    return E.select(E.ne(E.cast(c, "bool"), E.IntImm(0, "bool")), a, b)


where = register_op(
    "where", type_rel=_where_type, reference=lambda args, a: np.where(*args),
    pattern=OpPattern.BROADCAST,
    compute=lambda inputs, a, out, sched: broadcast_compute(inputs, out, _where_rule, "where"),
    num_inputs=3,
)
