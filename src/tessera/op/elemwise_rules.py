"""Scalar rules of elementwise operators, each with its NumPy twin.

A rule builds the TIR expression of one output element; its twin computes
the same values in NumPy (the op's reference, used for constant folding).
C leaves several cases undefined or surprising, and each rule pins them down
so kernels and the constant folder agree:

* narrow integers (8/16 bit) are promoted to `int` by C, so an intermediate
  `a + b` of two uint8 values can exceed 255 inside a fused kernel; the
  arithmetic rules wrap the result back to the element type;
* integer division or modulo by 0 (and INT_MIN / -1) trap; the divide and
  mod ops refuse a 0 divisor (a kernel check, see elemwise.py), and the
  rules still never trap: 0 gives 0, INT_MIN / -1 gives INT_MIN;
* shifts by a negative amount or by the type width or more are undefined;
  they follow ONNX BitShift-28 (0, or -1 for a right shift of a negative);
* float -> integer conversion out of range is undefined; it saturates and
  NaN becomes 0 (ONNX leaves this undefined);
* float max/min propagate NaN, as NumPy's maximum/minimum do.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import dtype as dt
from ..tir import expr as E

UnaryRule = Callable[[E.PrimExpr], E.PrimExpr]
BinaryRule = Callable[[E.PrimExpr, E.PrimExpr], E.PrimExpr]


def is_narrow_int(dtype: str) -> bool:
    """Integer types C promotes to `int` before doing arithmetic."""
    info = dt.info(dtype)
    return info.kind in ("int", "uint") and info.bits < 32


def is_signed_int(dtype: str) -> bool:
    return dt.info(dtype).kind == "int"


def unsigned_of(dtype: str) -> str:
    """The unsigned type of the same width (at least 32 bits)."""
    return f"uint{max(32, dt.info(dtype).bits)}"


# ------------------------------------------------------------- arithmetic
def wrapping(rule: BinaryRule) -> BinaryRule:
    """`rule` evaluated on int32 for narrow types, wrapped back to the type."""

    def apply(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
        if not is_narrow_int(a.dtype):
            return rule(a, b)
        return E.cast(rule(E.cast(a, "int32"), E.cast(b, "int32")), a.dtype)

    return apply


def wrapping_unary(rule: UnaryRule) -> UnaryRule:
    def apply(x: E.PrimExpr) -> E.PrimExpr:
        if not is_narrow_int(x.dtype):
            return rule(x)
        return E.cast(rule(E.cast(x, "int32")), x.dtype)

    return apply


def negate(x: E.PrimExpr) -> E.PrimExpr:
    """-x; wraps for INT_MIN (computed in the unsigned type, where C defines it)."""
    if not is_signed_int(x.dtype):
        return E.neg(x)
    u = unsigned_of(x.dtype)
    return E.cast(E.sub(E.const(0, u), E.cast(x, u)), x.dtype)


def _either(*conds: E.PrimExpr) -> E.PrimExpr:
    out = conds[0]
    for c in conds[1:]:
        out = E.logical_or(out, c)
    return out


def _safe_divisor(b: E.PrimExpr) -> E.PrimExpr:
    """`b`, with the divisors that trap in C (0, and -1 for signed) replaced by 1."""
    zero, one = E.const(0, b.dtype), E.const(1, b.dtype)
    bad = [E.eq(b, zero)]
    if is_signed_int(b.dtype):
        bad.append(E.eq(b, E.const(-1, b.dtype)))
    return E.select(_either(*bad), one, b)


def divide(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """True division for floats; truncating (C, ONNX) division for integers."""
    if dt.is_float(a.dtype):
        return E.div(a, b)
    zero = E.const(0, a.dtype)
    quotient = E.div(a, _safe_divisor(b))
    if is_signed_int(a.dtype):
        quotient = E.select(E.eq(b, E.const(-1, b.dtype)), negate(a), quotient)
    return E.select(E.eq(b, zero), zero, quotient)


def floor_mod(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """Remainder with the divisor's sign (Python's %); x % 0 is 0 for integers."""
    if dt.is_float(a.dtype):
        return E.floormod(a, b)
    return E.floormod(a, _safe_divisor(b))  # x % 1 == x % -1 == 0


def trunc_mod(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """Remainder with the dividend's sign (C's % and fmod)."""
    if dt.is_float(a.dtype):
        return E.binary(E.BinOp.TRUNCMOD, a, b)
    return E.binary(E.BinOp.TRUNCMOD, a, _safe_divisor(b))


def np_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    b = np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape))
    bad = (b == 0) | ((b == -1) if a.dtype.kind == "i" else False)
    safe = np.where(bad, 1, b).astype(a.dtype)
    q = np.floor_divide(a, safe)
    q = q + ((q * safe != a) & ((a < 0) != (safe < 0))).astype(a.dtype)  # floor -> trunc
    if a.dtype.kind == "i":
        q = np.where(b == -1, np.negative(a), q)
    return np.where(b == 0, 0, q).astype(a.dtype)


def _np_safe(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return b
    bad = (b == 0) | ((b == -1) if a.dtype.kind == "i" else False)
    return np.where(bad, 1, b).astype(b.dtype)


def np_floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.mod(a, _np_safe(a, b))


def np_trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.fmod(a, _np_safe(a, b))


# -------------------------------------------------------------- max / min
def maximum(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """max(a, b); NaN if either float operand is NaN (NumPy's maximum)."""
    if not dt.is_float(a.dtype):
        return E.maximum(a, b)
    return E.select(E.logical_or(E.gt(a, b), E.ne(a, a)), a, b)


def minimum(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    if not dt.is_float(a.dtype):
        return E.minimum(a, b)
    return E.select(E.logical_or(E.lt(a, b), E.ne(a, a)), a, b)


# ---------------------------------------------------------------- shifts
def _shift_in_range(b: E.PrimExpr) -> E.PrimExpr:
    in_width = E.lt(b, E.const(dt.info(b.dtype).bits, b.dtype))
    if is_signed_int(b.dtype):
        return E.logical_and(E.ge(b, E.const(0, b.dtype)), in_width)
    return in_width


def _shift_amount(b: E.PrimExpr) -> tuple[E.PrimExpr, E.PrimExpr]:
    """Whether `b` is a valid shift, and `b` made valid (both arms of a select may run)."""
    valid = _shift_in_range(b)
    return valid, E.select(valid, b, E.const(0, b.dtype))


def shift_left(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """a << b with bits past the top discarded; 0 when b is out of range.

    The shift runs on the unsigned type: C leaves shifting a negative
    value, or into the sign bit, undefined.
    """
    u = unsigned_of(a.dtype)
    valid, amount = _shift_amount(b)
    shifted = E.cast(E.binary(E.BinOp.SHL, E.cast(a, u), E.cast(amount, u)), a.dtype)
    return E.select(valid, shifted, E.const(0, a.dtype))


def shift_right(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """Arithmetic shift for signed types; out-of-range amounts give the sign fill."""
    zero = E.const(0, a.dtype)
    fill = zero
    if is_signed_int(a.dtype):
        fill = E.select(E.lt(a, zero), E.const(-1, a.dtype), zero)
    valid, amount = _shift_amount(b)
    return E.select(valid, E.binary(E.BinOp.SHR, a, amount), fill)


def np_shift_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    valid = (b >= 0) & (b < bits)
    u = np.dtype(f"uint{bits}")
    shifted = np.left_shift(a.view(u), np.where(valid, b, 0).astype(u)).view(a.dtype)
    return np.where(valid, shifted, 0).astype(a.dtype)


def np_shift_right(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    valid = (b >= 0) & (b < bits)
    fill = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    return np.where(valid, np.right_shift(a, np.where(valid, b, 0)), fill).astype(a.dtype)


# ------------------------------------------------------------------ power
def int_power(a: E.PrimExpr, b: E.PrimExpr) -> E.PrimExpr:
    """Integer a ** b by squaring (wrapping); negative exponents truncate 1 / a**-b."""
    return E.binary(E.BinOp.POW, a, b)


def np_int_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b.astype(a.dtype))
    if a.dtype.kind == "u":
        return np.power(a, b)
    negative = b < 0
    positive = np.power(a, np.where(negative, 0, b))
    odd = (b % 2) != 0
    inverse = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, inverse, positive).astype(a.dtype)


# ------------------------------------------------------------------- casts
def _int_bounds(dtype: str) -> tuple[float, float]:
    """Floats at or beyond which a conversion to `dtype` saturates (powers of 2, exact)."""
    bits = dt.info(dtype).bits
    if is_signed_int(dtype):
        return -(2.0 ** (bits - 1)), 2.0 ** (bits - 1)
    return -1.0, 2.0 ** bits


def cast(x: E.PrimExpr, dtype: str) -> E.PrimExpr:
    """Convert `x` to `dtype`; float -> integer saturates and maps NaN to 0."""
    if dt.is_storage_only(x.dtype) and dtype != "float32" and not dt.is_storage_only(dtype):
        x = E.cast(x, "float32")  # float16/bfloat16 hold bits: every use goes through float32
    if x.dtype == "bool" and dtype != "bool":
        # a select, not a C cast: gcc -Wall sees through casts of a comparison and warns when
        # the result is compared with 0 or complemented (-Wbool-compare, -Wbool-operation)
        return E.select(x, E.const(1, dtype), E.const(0, dtype))
    if not (dt.is_float(x.dtype) and dt.is_int(dtype)):
        return E.cast(x, dtype)
    lo, hi = _int_bounds(dtype)
    lo_c, hi_c = E.const(lo, x.dtype), E.const(hi, x.dtype)
    inside = E.logical_and(E.gt(x, lo_c), E.lt(x, hi_c))  # false for NaN
    # convert only in-range values: both arms of a select may be evaluated
    value = E.cast(E.select(inside, x, E.const(0, x.dtype)), dtype)
    value = E.select(E.le(x, lo_c), E.const(dt.min_value(dtype), dtype), value)
    return E.select(E.ge(x, hi_c), E.const(dt.max_value(dtype), dtype), value)


def np_cast(x: np.ndarray, dtype: str) -> np.ndarray:
    x = np.asarray(x)
    if dt.is_storage_only(x.dtype.name) and not dt.is_float(dtype):
        x = x.astype(np.float32)  # as the kernel converts
    if not (x.dtype.kind == "f" and dt.is_int(dtype)):
        with np.errstate(all="ignore"):
            return x.astype(dt.to_numpy(dtype))
    lo, hi = _int_bounds(dtype)
    inside = (x > lo) & (x < hi)
    out = np.where(inside, x, 0).astype(dtype)
    out[x <= lo] = dt.min_value(dtype)
    out[x >= hi] = dt.max_value(dtype)
    return out


# ----------------------------------------------------- accurate transcendentals
def expm1(x: E.PrimExpr) -> E.PrimExpr:
    """exp(x) - 1 without cancellation near 0 (Kahan's trick, from exp and log)."""
    u = E.call(E.Intrinsic.EXP, [x], x.dtype)
    one = E.const(1, x.dtype)
    um1 = E.sub(u, one)
    ratio = E.div(E.mul(um1, x), E.call(E.Intrinsic.LOG, [u], x.dtype))
    general = E.select(E.eq(um1, E.const(-1, x.dtype)), E.const(-1, x.dtype), ratio)
    # u == inf (x large): the ratio would be inf * x / inf; the answer is u - 1 = inf
    general = E.select(E.call(E.Intrinsic.ISINF, [u], "bool"), u, general)
    return E.select(E.eq(u, one), x, general)


def log1p(x: E.PrimExpr) -> E.PrimExpr:
    """log(1 + x) without losing x when it is tiny (Kahan's trick)."""
    one = E.const(1, x.dtype)
    w = E.add(one, x)
    wm1 = E.sub(w, one)
    ratio = E.div(E.mul(E.call(E.Intrinsic.LOG, [w], x.dtype), x), wm1)
    general = E.select(E.call(E.Intrinsic.ISINF, [w], "bool"), w, ratio)
    return E.select(E.eq(w, one), x, general)


def softplus(x: E.PrimExpr) -> E.PrimExpr:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no overflow for large x."""
    zero = E.const(0, x.dtype)
    magnitude = E.call(E.Intrinsic.FABS, [x], x.dtype)
    tail = log1p(E.call(E.Intrinsic.EXP, [E.neg(magnitude)], x.dtype))
    return E.add(maximum(x, zero), tail)


def sigmoid(x: E.PrimExpr) -> E.PrimExpr:
    """1 / (1 + exp(-x)): 0 and 1 at the ends, NaN stays NaN."""
    one = E.const(1, x.dtype)
    return E.div(one, E.add(one, E.call(E.Intrinsic.EXP, [E.neg(x)], x.dtype)))


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def np_erf(x: np.ndarray) -> np.ndarray:
    """NumPy has no erf; math.erf per element (only constant folding uses it)."""
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def np_softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x.dtype.type(0), x)


SQRT1_2 = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
