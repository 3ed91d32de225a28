"""Elementwise and broadcasting operators.

Unary and binary ops are declared one line each through `_unary`/`_binary`,
which derive the type relation, NumPy reference and TE compute from a scalar
rule. Activations with attributes (leaky_relu, clip, ...) follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, broadcast_indices, broadcast_shapes, tensors
from .registry import Op, OpPattern, register_op

ScalarRule = Callable[[E.PrimExpr], E.PrimExpr]
BinaryRule = Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]

# Which dtypes an op accepts: a predicate and its description for errors.
FLOAT = (dt.is_float, "a float dtype")
NUMERIC = (lambda d: d != "bool", "a numeric dtype")
SIGNED = (lambda d: dt.is_float(d) or dt.info(d).kind == "int", "a signed dtype")
INTEGER = (lambda d: dt.is_int(d), "an integer dtype")
BOOL = (dt.is_bool, "bool")
ANY = (lambda d: True, "any dtype")


def _check_dtype(op_name: str, d: str, allowed: tuple) -> None:
    predicate, description = allowed
    if not predicate(d):
        raise TypeInferenceError(f"{op_name} needs {description}, got {d}")


def _unary(
    name: str,
    rule: ScalarRule,
    reference: Callable[[np.ndarray], np.ndarray],
    allowed: tuple = FLOAT,
    out_dtype: str | None = None,
) -> Op:
    def type_rel(types: tuple[Type, ...], attrs: object) -> Type:
        x = as_tensor(types[0])
        _check_dtype(name, x.dtype, allowed)
        return TensorType(x.shape, out_dtype or x.dtype)

    def ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(reference(args[0])).astype(out_dtype or args[0].dtype)

    def compute(inputs: list[te.Tensor], attrs: object, out: TensorType) -> te.Tensor:
        x = inputs[0]
        return te.compute(x.shape, lambda *i: E.cast(rule(x[i]), out.dtype), name=name.split(".")[-1])

    return register_op(name, type_rel=type_rel, reference=ref, pattern=OpPattern.ELEMWISE,
                       compute=compute, num_inputs=1)


def _intrinsic(fn: E.Intrinsic) -> ScalarRule:
    return lambda x: E.call(fn, [x], x.dtype)


def _predicate(fn: E.Intrinsic) -> ScalarRule:
    return lambda x: E.call(fn, [x], "bool")


def _binary(
    name: str,
    rule: BinaryRule,
    reference: Callable[[np.ndarray, np.ndarray], np.ndarray],
    allowed: tuple = NUMERIC,
    out_dtype: str | None = None,
) -> Op:
    def type_rel(types: tuple[Type, ...], attrs: object) -> Type:
        a, b = tensors(types)
        if a.dtype != b.dtype:
            raise TypeInferenceError(f"{name} operands must share a dtype, got {a.dtype} and {b.dtype}")
        _check_dtype(name, a.dtype, allowed)
        return TensorType(broadcast_shapes(a.shape, b.shape), out_dtype or a.dtype)

    def ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(reference(args[0], args[1])).astype(out_dtype or args[0].dtype)

    def compute(inputs: list[te.Tensor], attrs: object, out: TensorType) -> te.Tensor:
        a, b = inputs

        def element(*i: E.Var) -> E.PrimExpr:
            return rule(a[broadcast_indices(i, a.shape)], b[broadcast_indices(i, b.shape)])

        return te.compute(out.shape, element, name=name.split(".")[-1])

    return register_op(name, type_rel=type_rel, reference=ref, pattern=OpPattern.BROADCAST,
                       compute=compute, num_inputs=2)


def _c_trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    safe_b = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe_b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def _sign(x: E.PrimExpr) -> E.PrimExpr:
    zero, one = E.const(0, x.dtype), E.const(1, x.dtype)
    return E.select(E.gt(x, zero), one, E.select(E.lt(x, zero), E.neg(one), zero))


def _abs(x: E.PrimExpr) -> E.PrimExpr:
    if dt.is_float(x.dtype):
        return E.call(E.Intrinsic.FABS, [x], x.dtype)
    if dt.is_unsigned(x.dtype):
        return x
    return E.call(E.Intrinsic.ABS, [x], x.dtype)


# --------------------------------------------------------------- unary math
exp = _unary("exp", _intrinsic(E.Intrinsic.EXP), np.exp)
log = _unary("log", _intrinsic(E.Intrinsic.LOG), np.log)
sqrt = _unary("sqrt", _intrinsic(E.Intrinsic.SQRT), np.sqrt)
tanh = _unary("tanh", _intrinsic(E.Intrinsic.TANH), np.tanh)
sin = _unary("sin", _intrinsic(E.Intrinsic.SIN), np.sin)
cos = _unary("cos", _intrinsic(E.Intrinsic.COS), np.cos)
tan = _unary("tan", _intrinsic(E.Intrinsic.TAN), np.tan)
asin = _unary("asin", _intrinsic(E.Intrinsic.ASIN), np.arcsin)
acos = _unary("acos", _intrinsic(E.Intrinsic.ACOS), np.arccos)
atan = _unary("atan", _intrinsic(E.Intrinsic.ATAN), np.arctan)
sinh = _unary("sinh", _intrinsic(E.Intrinsic.SINH), np.sinh)
cosh = _unary("cosh", _intrinsic(E.Intrinsic.COSH), np.cosh)
asinh = _unary("asinh", _intrinsic(E.Intrinsic.ASINH), np.arcsinh)
acosh = _unary("acosh", _intrinsic(E.Intrinsic.ACOSH), np.arccosh)
atanh = _unary("atanh", _intrinsic(E.Intrinsic.ATANH), np.arctanh)
floor = _unary("floor", _intrinsic(E.Intrinsic.FLOOR), np.floor)
ceil = _unary("ceil", _intrinsic(E.Intrinsic.CEIL), np.ceil)
round = _unary("round", _intrinsic(E.Intrinsic.ROUND), np.round)  # noqa: A001 - half to even
sigmoid = _unary(
    "sigmoid", lambda x: E.div(E.const(1, x.dtype), E.add(E.const(1, x.dtype), E.call(E.Intrinsic.EXP, [E.neg(x)], x.dtype))),
    lambda x: 1.0 / (1.0 + np.exp(-x)),
)
negative = _unary("negative", E.neg, np.negative, SIGNED)
abs = _unary("abs", _abs, np.abs, NUMERIC)  # noqa: A001
sign = _unary("sign", _sign, np.sign, NUMERIC)
reciprocal = _unary("reciprocal", lambda x: E.div(E.const(1, x.dtype), x), np.reciprocal)
logical_not = _unary("logical_not", E.logical_not, np.logical_not, BOOL)
bitwise_not = _unary("bitwise_not", lambda x: E.UnaryOp(E.UnOp.BITNOT, x, x.dtype), np.invert, INTEGER)
isnan = _unary("isnan", _predicate(E.Intrinsic.ISNAN), np.isnan, FLOAT, "bool")
isinf = _unary("isinf", _predicate(E.Intrinsic.ISINF), np.isinf, FLOAT, "bool")
relu = _unary("nn.relu", lambda x: E.maximum(x, E.const(0, x.dtype)), lambda x: np.maximum(x, 0), NUMERIC)

# ----------------------------------------------------- binary, broadcasting
add = _binary("add", E.add, np.add)
subtract = _binary("subtract", E.sub, np.subtract)
multiply = _binary("multiply", E.mul, np.multiply)
divide = _binary("divide", E.div, _c_trunc_div)  # ints truncate, as C and ONNX do
floor_mod = _binary("floor_mod", E.floormod, np.mod)
trunc_mod = _binary("trunc_mod", lambda a, b: E.binary(E.BinOp.TRUNCMOD, a, b), np.fmod)
power = _binary("power", lambda a, b: E.binary(E.BinOp.POW, a, b), np.power)
maximum = _binary("maximum", E.maximum, np.maximum)
minimum = _binary("minimum", E.minimum, np.minimum)
equal = _binary("equal", E.eq, np.equal, ANY, "bool")
not_equal = _binary("not_equal", E.ne, np.not_equal, ANY, "bool")
less = _binary("less", E.lt, np.less, NUMERIC, "bool")
less_equal = _binary("less_equal", E.le, np.less_equal, NUMERIC, "bool")
greater = _binary("greater", E.gt, np.greater, NUMERIC, "bool")
greater_equal = _binary("greater_equal", E.ge, np.greater_equal, NUMERIC, "bool")
logical_and = _binary("logical_and", E.logical_and, np.logical_and, BOOL)
logical_or = _binary("logical_or", E.logical_or, np.logical_or, BOOL)
logical_xor = _binary("logical_xor", E.ne, np.logical_xor, BOOL)
bitwise_and = _binary("bitwise_and", lambda a, b: E.binary(E.BinOp.BITAND, a, b), np.bitwise_and, INTEGER)
bitwise_or = _binary("bitwise_or", lambda a, b: E.binary(E.BinOp.BITOR, a, b), np.bitwise_or, INTEGER)
bitwise_xor = _binary("bitwise_xor", lambda a, b: E.binary(E.BinOp.BITXOR, a, b), np.bitwise_xor, INTEGER)
left_shift = _binary("left_shift", lambda a, b: E.binary(E.BinOp.SHL, a, b), np.left_shift, INTEGER)
right_shift = _binary("right_shift", lambda a, b: E.binary(E.BinOp.SHR, a, b), np.right_shift, INTEGER)


# ------------------------------------------------- ops with scalar attributes
@dataclass(frozen=True)
class CastAttrs:
    dtype: str


def _cast_type(types: tuple[Type, ...], attrs: CastAttrs) -> Type:
    x = as_tensor(types[0])
    dt.info(attrs.dtype)
    return TensorType(x.shape, attrs.dtype)


def _cast_ref(args: list[np.ndarray], attrs: CastAttrs) -> np.ndarray:
    with np.errstate(all="ignore"):
        return args[0].astype(attrs.dtype)


def _cast_compute(inputs: list[te.Tensor], attrs: CastAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]
    return te.compute(x.shape, lambda *i: E.cast(x[i], attrs.dtype), name="cast")


cast = register_op("cast", type_rel=_cast_type, reference=_cast_ref, pattern=OpPattern.ELEMWISE,
                   compute=_cast_compute, attrs=CastAttrs, num_inputs=1)


@dataclass(frozen=True)
class ClipAttrs:
    a_min: float
    a_max: float


def _same_type(types: tuple[Type, ...], attrs: object) -> Type:
    return as_tensor(types[0])


def _clip_compute(inputs: list[te.Tensor], attrs: ClipAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]

    def element(*i: E.Var) -> E.PrimExpr:
        v = x[i]
        lo = E.const(max(attrs.a_min, dt.min_value(v.dtype)), v.dtype)
        hi = E.const(min(attrs.a_max, dt.max_value(v.dtype)), v.dtype)
        return E.minimum(E.maximum(v, lo), hi)

    return te.compute(x.shape, element, name="clip")


clip = register_op(
    "clip", type_rel=_same_type,
    reference=lambda args, a: np.clip(args[0], a.a_min, a.a_max).astype(args[0].dtype),
    pattern=OpPattern.ELEMWISE, compute=_clip_compute, attrs=ClipAttrs, num_inputs=1,
)


@dataclass(frozen=True)
class LeakyReluAttrs:
    alpha: float = 0.01


def _leaky_compute(inputs: list[te.Tensor], attrs: LeakyReluAttrs, out: TensorType) -> te.Tensor:
    x = inputs[0]

    def element(*i: E.Var) -> E.PrimExpr:
        v = x[i]
        return E.select(E.gt(v, E.const(0, v.dtype)), v, E.mul(v, E.const(attrs.alpha, v.dtype)))

    return te.compute(x.shape, element, name="leaky_relu")


leaky_relu = register_op(
    "nn.leaky_relu", type_rel=_same_type,
    reference=lambda args, a: np.where(args[0] > 0, args[0], args[0] * np.asarray(a.alpha, args[0].dtype)),
    pattern=OpPattern.ELEMWISE, compute=_leaky_compute, attrs=LeakyReluAttrs, num_inputs=1,
)


def _where_type(types: tuple[Type, ...], attrs: object) -> Type:
    c, a, b = tensors(types)
    if c.dtype != "bool":
        raise TypeInferenceError(f"where's condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise TypeInferenceError(f"where's branches must share a dtype, got {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shapes(c.shape, a.shape, b.shape), a.dtype)


def _where_compute(inputs: list[te.Tensor], attrs: object, out: TensorType) -> te.Tensor:
    c, a, b = inputs

    def element(*i: E.Var) -> E.PrimExpr:
        return E.select(
            E.ne(E.cast(c[broadcast_indices(i, c.shape)], "bool"), E.IntImm(0, "bool")),
            a[broadcast_indices(i, a.shape)],
            b[broadcast_indices(i, b.shape)],
        )

    return te.compute(out.shape, element, name="where")


where = register_op(
    "where", type_rel=_where_type, reference=lambda args, a: np.where(*args),
    pattern=OpPattern.BROADCAST, compute=_where_compute, num_inputs=3,
)
