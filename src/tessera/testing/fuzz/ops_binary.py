"""Generators for elementwise operators of several (broadcast) inputs.

The primary input takes a random side; its partner gets a shape that
broadcasts with it (equal, a suffix, dims set to 1, or wider, so the output
grows). Divisors are kept away from zero (integer division by zero is a
known tessera bug, and undefined in C), shift counts below the bit width.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np
from onnx import helper

from .graph import FLOATS, INTS, NUMERIC, UNSIGNED, Facts, GraphBuilder, Reject, Value, dtype_range
from .spec import MAX_AMP, corners, exact_or, near_zero_amp, register


def partner_shape(g: GraphBuilder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape` (multidirectionally)."""
    mode = g.chooser.choice(("same", "same", "suffix", "ones", "wider"))
    if mode == "same":
        return shape
    if mode == "suffix":
        return shape[g.chooser.integer(0, len(shape)):]
    if mode == "ones":
        return tuple(1 if g.chooser.boolean() else d for d in shape)
    # wider: extra leading dims, and real extents where `shape` has 1
    lead = tuple(g.chooser.integer(1, 3) for _ in range(g.chooser.integer(0, 2)))
    grown = tuple(g.chooser.integer(2, 3) if d == 1 and g.chooser.boolean() else d for d in shape)
    out = lead + grown
    return out if math.prod(out) <= g.max_elements else shape


def unidirectional_shape(g: GraphBuilder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to `shape` without growing it."""
    suffix = shape[g.chooser.integer(0, len(shape)):]
    return tuple(1 if g.chooser.boolean(0.4) else d for d in suffix)


def ordered(g: GraphBuilder, v: Value, other: Value) -> list[Value]:
    return [v, other] if g.chooser.boolean() else [other, v]


def nonzero_partner(g: GraphBuilder, dtype: str, shape: tuple[int, ...]) -> Value:
    """A divisor with no zeros (a fresh leaf, exact)."""
    if dtype in UNSIGNED:
        return g.leaf(dtype, shape, lo=1, hi=9)
    return g.leaf(dtype, shape, lo=-6, hi=6, nonzero=True)


def _excludes_zero(v: Value) -> bool:
    return v.lo > 0 or v.hi < 0


ORT_MINMAX = tuple(d for d in NUMERIC if d not in ("int16", "uint16"))  # what onnxruntime implements

# --------------------------------------------------------- arithmetic
Combine = Callable[[float, float], float]


def _arith(op: str, combine: Combine, ulps: float, dtypes: tuple[str, ...] = NUMERIC) -> None:
    @register(op, "binary", dtypes=dtypes)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        other = g.operand(v.dtype, partner_shape(g, v.shape))
        if not other.finite:
            raise Reject("non-finite partner")
        a, b = ordered(g, v, other)
        lo, hi = corners(combine, a, b)
        # one IEEE add of exact operands rounds identically everywhere; a product may be contracted
        # into a following add (FMA), so only Add/Sub stay exact
        tol = exact_or(v.dtype, [a, b], ulps)
        return g.node(op, [a, b], outputs=[{"lo": lo, "hi": hi, "finite": a.finite and b.finite, "tol": tol}])


_arith("Add", operator.add, 0)
_arith("Sub", operator.sub, 0)
_arith("Mul", operator.mul, 1)


@register("Div", "binary", dtypes=NUMERIC)
def _div(g: GraphBuilder, v: Value) -> list[Value]:
    as_divisor = g.chooser.boolean(0.3) and (_excludes_zero(v) or (v.dtype in FLOATS and v.exact))
    if "int_div_zero" not in g.avoid and v.dtype in INTS and g.chooser.boolean(0.2):
        other = g.leaf(v.dtype, partner_shape(g, v.shape))  # may hold zeros
        a, b = v, other
    elif as_divisor:
        a, b = g.leaf(v.dtype, partner_shape(g, v.shape)), v
    else:
        a, b = v, nonzero_partner(g, v.dtype, partner_shape(g, v.shape))
    finite = a.finite and b.finite and _excludes_zero(b)
    lo, hi = corners(operator.truediv, a, b) if _excludes_zero(b) else (math.nan, math.nan)
    if v.dtype in INTS:
        lo, hi = -max(abs(a.lo), abs(a.hi)), max(abs(a.lo), abs(a.hi))
    amp = near_zero_amp(b)  # an inexact divisor near 0
    if amp > MAX_AMP:
        raise Reject("division by an inexact value near 0")
    tol = exact_or(v.dtype, [a, b], 2, amp)
    return g.node("Div", [a, b], outputs=[{"lo": lo, "hi": hi, "finite": finite, "tol": tol}])


@register("Pow", "binary", dtypes=FLOATS + ("int32", "int64"), needs_exact=True)
def _pow(g: GraphBuilder, v: Value) -> list[Value]:
    """Exact operands only: a negative base or a zero with a negative exponent give NaN or inf."""
    if v.dtype in INTS:
        if v.magnitude > 8:
            raise Reject("integer power would overflow")
        exponent = g.leaf(g.chooser.choice(("int32", "int64")), partner_shape(g, v.shape), lo=0, hi=3)
        m = max(v.magnitude, 1.0) ** 3
        return g.node("Pow", [v, exponent], outputs=[{"lo": -m, "hi": m, "finite": True}])
    exp_dtype = g.chooser.choice((v.dtype, v.dtype, "int64", "int32"))
    if exp_dtype in INTS:
        exponent = g.leaf(exp_dtype, partner_shape(g, v.shape), lo=-2, hi=3)
    else:
        exponent = g.leaf(exp_dtype, partner_shape(g, v.shape), lo=-2, hi=2.5)
    positive = v.lo > 0
    lo, hi = corners(lambda x, y: x ** y, v, exponent) if positive else (math.nan, math.nan)
    return g.node("Pow", [v, exponent], outputs=[{"lo": lo, "hi": hi, "finite": positive, "tol": exact_or(
        v.dtype, [v, exponent], 64)}])


@register("Mod", "binary", dtypes=NUMERIC, needs_exact=True, min_opset=10)
def _mod(g: GraphBuilder, v: Value) -> list[Value]:
    fmod = 1 if v.dtype in FLOATS else g.chooser.choice((0, 1))
    if v.dtype in UNSIGNED or v.dtype in FLOATS or g.chooser.boolean(0.7):
        a, b = v, nonzero_partner(g, v.dtype, partner_shape(g, v.shape))
    elif _excludes_zero(v):
        a, b = g.leaf(v.dtype, partner_shape(g, v.shape)), v
    else:
        raise Reject("divisor may be zero")
    m = b.magnitude
    return g.node("Mod", [a, b], {"fmod": fmod}, [{"lo": -m, "hi": m, "finite": a.finite, "tol": 0.0}])


def _variadic(op: str, combine: Callable[[list[Value]], tuple[float, float]], ulps: float,
              dtypes: tuple[str, ...]) -> None:
    @register(op, "binary", dtypes=dtypes)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        others = [g.operand(v.dtype, partner_shape(g, v.shape)) for _ in range(g.chooser.integer(0, 2))]
        if not all(o.finite for o in others):
            raise Reject("non-finite partner")
        inputs = [v, *others]
        turn = g.chooser.integer(0, len(inputs) - 1)  # the primary input in any position
        inputs = inputs[turn:] + inputs[:turn]
        lo, hi = combine(inputs)
        tol = exact_or(v.dtype, inputs, ulps if len(inputs) > 1 else 0)
        return g.node(op, inputs, outputs=[{"lo": lo, "hi": hi, "finite": True, "tol": tol}])


_variadic("Max", lambda vs: (max(v.lo for v in vs), max(v.hi for v in vs)), 0, ORT_MINMAX)
_variadic("Min", lambda vs: (min(v.lo for v in vs), min(v.hi for v in vs)), 0, ORT_MINMAX)
_variadic("Sum", lambda vs: (sum(v.lo for v in vs), sum(v.hi for v in vs)), 2, FLOATS + ("int32", "int64"))
_variadic("Mean", lambda vs: (min(v.lo for v in vs), max(v.hi for v in vs)), 4, ("float32",))


@register("PRelu", "binary", dtypes=("float32",))
def _prelu(g: GraphBuilder, v: Value) -> list[Value]:
    slope = g.leaf(v.dtype, unidirectional_shape(g, v.shape), lo=-2, hi=2)
    m = v.magnitude * 2
    return g.node("PRelu", [v, slope], outputs=[{"lo": min(v.lo, -m), "hi": max(v.hi, m), "finite": v.finite,
                                                  "tol": exact_or(v.dtype, [v, slope], 1)}])


# ------------------------------------------------------- comparisons, logic
def _compare(op: str, dtypes: tuple[str, ...], min_opset: int = 1) -> None:
    @register(op, "binary", dtypes=dtypes, needs_exact=True, specials_ok=True, min_opset=min_opset)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        other = g.operand(v.dtype, partner_shape(g, v.shape))
        if not other.exact:
            raise Reject("comparison with an inexact value")
        return g.node(op, ordered(g, v, other))


_compare("Equal", NUMERIC + ("bool",))
_compare("Greater", NUMERIC)
_compare("Less", NUMERIC)
_compare("GreaterOrEqual", NUMERIC, 12)
_compare("LessOrEqual", NUMERIC, 12)


def _logic(op: str) -> None:
    @register(op, "binary", dtypes=("bool",))
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        return g.node(op, ordered(g, v, g.operand("bool", partner_shape(g, v.shape))))


for _op in ("And", "Or", "Xor"):
    _logic(_op)


def _bit_bounds(dtype: str, vs: list[Value]) -> tuple[float, float]:
    if dtype in UNSIGNED:
        top = max(v.hi for v in vs)
        return 0.0, float(2 ** int(top).bit_length() - 1)
    width = max(int(max(abs(v.lo), abs(v.hi))).bit_length() for v in vs)
    return -float(2 ** width), float(2 ** width - 1)


def _bitwise(op: str) -> None:
    @register(op, "binary", dtypes=INTS, min_opset=18)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        inputs = ordered(g, v, g.operand(v.dtype, partner_shape(g, v.shape)))
        lo, hi = _bit_bounds(v.dtype, inputs)
        return g.node(op, inputs, outputs=[{"lo": lo, "hi": hi, "finite": True}])


for _op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    _bitwise(_op)


@register("BitShift", "binary", dtypes=UNSIGNED, min_opset=11)
def _bit_shift(g: GraphBuilder, v: Value) -> list[Value]:
    bits = np.dtype(v.dtype).itemsize * 8
    shift = g.leaf(v.dtype, partner_shape(g, v.shape), lo=0, hi=min(bits - 1, 7))
    direction = g.chooser.choice(("LEFT", "RIGHT"))
    if direction == "LEFT":
        hi = v.hi * 2 ** shift.hi
        lo, hi = (v.lo, hi) if hi <= dtype_range(v.dtype)[1] else dtype_range(v.dtype)  # unsigned wraps
    else:
        lo, hi = 0.0, v.hi
    return g.node("BitShift", [v, shift], {"direction": direction}, [{"lo": lo, "hi": hi, "finite": True}])


@register("Where", "binary", dtypes=tuple(d for d in NUMERIC if d not in ("int16", "uint16", "uint64")),
          specials_ok=True, min_opset=9)
def _where(g: GraphBuilder, v: Value) -> list[Value]:
    cond = g.operand("bool", partner_shape(g, v.shape))
    other = g.operand(v.dtype, partner_shape(g, v.shape))
    x, y = ordered(g, v, other)
    return g.node("Where", [cond, x, y], outputs=[{"lo": min(x.lo, y.lo), "hi": max(x.hi, y.hi),
                                                    "finite": x.finite and y.finite, "tol": max(x.tol, y.tol)}])


# ------------------------------------------------------------ casts
CAST_TARGETS = NUMERIC + ("bool",)


def _cast_facts(v: Value, to: str) -> Facts:
    """Facts of Cast(v, to), or Reject if the conversion is undefined or discontinuous."""
    if to == v.dtype or v.dtype == "bool":
        return {"lo": max(v.lo, 0.0) if v.dtype == "bool" else v.lo, "hi": v.hi, "finite": True, "tol": v.tol}
    lo_t, hi_t = dtype_range(to)
    if v.dtype in FLOATS and to in INTS + ("bool",):
        if not (v.exact and v.finite):
            raise Reject("float to int of an inexact or non-finite value")
        if to != "bool" and not (lo_t <= math.trunc(v.lo) and math.trunc(v.hi) <= hi_t):
            raise Reject("float to int out of range is undefined")
        return {"lo": math.trunc(v.lo), "hi": math.trunc(v.hi), "finite": True}
    if to in FLOATS:
        tol = v.tol if v.dtype in FLOATS else 0.0
        wide = v.dtype == "float32" or (v.dtype in INTS and max(abs(v.lo), abs(v.hi)) < 2 ** 24)
        return {"lo": v.lo, "hi": v.hi, "finite": v.finite, "tol": tol if wide or to == "float64" else tol + 2 ** -23}
    if to == "bool":
        return {}
    if lo_t <= v.lo and v.hi <= hi_t:
        return {"lo": v.lo, "hi": v.hi, "finite": True}
    return {"lo": lo_t, "hi": hi_t, "finite": True}  # integers wrap modulo 2^bits


@register("Cast", "unary", dtypes=CAST_TARGETS, specials_ok=True)
def _cast(g: GraphBuilder, v: Value) -> list[Value]:
    to = g.chooser.choice(CAST_TARGETS)
    if not v.finite and to not in FLOATS:
        raise Reject("NaN to int")
    fact = _cast_facts(v, to)
    return g.node("Cast", [v], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(to))}, [fact])


@register("CastLike", "unary", dtypes=CAST_TARGETS, min_opset=15)
def _cast_like(g: GraphBuilder, v: Value) -> list[Value]:
    to = g.chooser.choice(CAST_TARGETS)
    fact = _cast_facts(v, to)
    like = g.leaf(to, tuple(g.chooser.integer(1, 2) for _ in range(g.chooser.integer(0, 2))))
    return g.node("CastLike", [v, like], outputs=[fact])


