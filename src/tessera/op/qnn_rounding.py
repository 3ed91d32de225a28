"""Whose rounding the integer kernels reproduce: ONNX's, or LiteRT's (TFLite's).

The two frameworks define int8 inference with different arithmetic, and a
quantised model is only right bit for bit under the arithmetic it was made for:

* ``Rounding.ONNX``: QuantizeLinear rounds half to even; tessera's kernels
  requantise with one fixed-point rounding, ``(acc * m + 2^(s-1)) >> s``
  (``op.qnn``), which matches onnxruntime's float requantisation to within
  2^-24 (docs/quantization.md);
* ``Rounding.TFLITE``: LiteRT's reference arithmetic, which TFLite Micro and
  CMSIS-NN share. QUANTIZE rounds half away from zero; convolutions and fully
  connected layers rescale with ``MultiplyByQuantizedMultiplier``: a Q31
  multiplier and a power-of-two exponent per output channel
  (``quantize_multiplier``), a rounding doubling high multiply
  (round half up at bit 31) and then a rounding right shift (round half away
  from zero). Two roundings, so no single fixed-point rounding equals it.
  FULLY_CONNECTED instead rescales in double precision and rounds once
  (`rescale_double_expr`); tessera's dense takes float64 scales for it.

This module holds the LiteRT arithmetic as NumPy (the references) and as TIR
(the kernels), so the two cannot drift apart.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..tir import expr as E


class Rounding(enum.Enum):
    ONNX = "onnx"
    TFLITE = "tflite"


# ------------------------------------------------------------------ multipliers
def quantize_multiplier(real: float) -> tuple[int, int]:
    """LiteRT's QuantizeMultiplier: (q, e) with real ~ q * 2^(e - 31), q a Q31 value in [2^30, 2^31)."""
    if real == 0.0:
        return 0, 0
    fraction, exponent = math.frexp(real)
    q = int(math.floor(abs(fraction) * 2.0**31 + 0.5))  # std::round: half away from zero (the value is >= 0)
    q = q if fraction >= 0 else -q
    if q == 1 << 31:
        q //= 2
        exponent += 1
    if exponent < -31:
        return 0, 0
    return q, exponent


def multiplier_table(reals: np.ndarray) -> np.ndarray:
    """Rows (Q31 multiplier, left shift, right shift) per channel: the int32 (3, C) operand of a TFLite kernel."""
    table = np.zeros((3, reals.size), np.int64)
    for c, real in enumerate(np.asarray(reals, np.float64).reshape(-1)):
        q, e = quantize_multiplier(float(real))
        table[:, c] = (q, max(e, 0), max(-e, 0))
    if np.any(table[1] > 30) or np.any(table[2] > 31):
        raise ValueError(f"requantisation multipliers {reals} are outside what LiteRT's arithmetic represents")
    return table.astype(np.int32)


@dataclass(frozen=True)
class TFLiteAddScales:
    """LiteRT's int8 ADD: each input, shifted left by `left_shift`, is rescaled by its (Q31, exponent)
    multiplier, and the sum by the output's (`op.qnn_rounding.quantize_multiplier` values)."""

    left_shift: int
    a: tuple[int, int]
    b: tuple[int, int]
    out: tuple[int, int]


# ------------------------------------------------------------------ NumPy references
def multiply_ref(x: npt.ArrayLike, q: npt.ArrayLike, left: npt.ArrayLike, right: npt.ArrayLike) -> np.ndarray:
    """MultiplyByQuantizedMultiplier on int32 values (int64 arrays in and out; operands broadcast)."""
    a = np.asarray(x, np.int64) << np.asarray(left, np.int64)
    high = (a * np.asarray(q, np.int64) + (1 << 30)) >> 31  # SaturatingRoundingDoublingHighMul: half up
    r = np.asarray(right, np.int64)
    mask = (np.int64(1) << r) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> r) + ((high & mask) > threshold)  # RoundingDivideByPOT: half away from zero


def round_half_away_ref(v: npt.ArrayLike) -> np.ndarray:
    """std::round on float32 values, as float32."""
    v = np.asarray(v, np.float32)
    t = np.trunc(v)
    d = v - t  # exact
    return (t + np.where(d >= 0.5, 1, np.where(d <= -0.5, -1, 0))).astype(np.float32)


def divide_half_away_ref(total: np.ndarray, count: int) -> np.ndarray:
    """(total +- count / 2) / count with C's truncating division, as LiteRT's int8 average pool divides."""
    t = total.astype(np.int64)
    half = count // 2
    num = np.where(t > 0, t + half, t - half)
    return np.sign(num) * (np.abs(num) // count)


# ------------------------------------------------------------------ TIR
def multiply_expr(x: E.PrimExpr, q: E.PrimExpr, left: E.PrimExpr | None, right: E.PrimExpr) -> E.PrimExpr:
    """TIR of `multiply_ref` for an int32 `x` and int32 q / left / right: an int32 result (`left` None:
    no left shift, so a Cortex-M multiplies 32 x 32 -> 64 bits in one instruction)."""
    a = E.cast(x, "int64") if left is None else E.binary(E.BinOp.SHL, E.cast(x, "int64"), E.cast(left, "int64"))
    product = E.mul(a, E.cast(q, "int64"))
    high = E.cast(E.binary(E.BinOp.SHR, E.add(product, E.const(1 << 30, "int64")), E.const(31, "int64")), "int32")
    mask = E.sub(E.binary(E.BinOp.SHL, E.const(1, "int32"), right), E.const(1, "int32"))
    threshold = E.add(E.binary(E.BinOp.SHR, mask, E.const(1, "int32")),
                      E.select(E.lt(high, E.const(0, "int32")), E.const(1, "int32"), E.const(0, "int32")))
    up = E.select(E.gt(E.binary(E.BinOp.BITAND, high, mask), threshold), E.const(1, "int32"), E.const(0, "int32"))
    return E.add(E.binary(E.BinOp.SHR, high, right), up)


def round_half_away_expr(v: E.PrimExpr, dtype: str = "float32") -> E.PrimExpr:
    """std::round of a float `v` (of `dtype`) already clamped to a small range (|v| < 2^31), as `dtype`."""
    t = E.cast(E.cast(v, "int32"), dtype)  # truncation toward zero
    d = E.sub(v, t)  # exact
    step = E.select(E.ge(d, E.const(0.5, dtype)), E.const(1.0, dtype),
                    E.select(E.le(d, E.const(-0.5, dtype)), E.const(-1.0, dtype), E.const(0.0, dtype)))
    return E.add(t, step)


def rescale_double_expr(acc: E.PrimExpr, scale: E.PrimExpr) -> E.PrimExpr:
    """round(double(acc) * scale), half away from zero, as int32: LiteRT's FULLY_CONNECTED
    rescales in double precision (its reference kernel, "to avoid loss of precision")."""
    v = E.mul(E.cast(acc, "float64"), scale)
    v = E.minimum(E.maximum(v, E.const(-1024.0, "float64")), E.const(1024.0, "float64"))  # int8 saturates anyway
    return E.cast(round_half_away_expr(v, "float64"), "int32")


def rescale_double_ref(acc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    v = np.clip(acc.astype(np.float64) * scale.astype(np.float64), -1024, 1024)
    t = np.trunc(v)
    return (t + np.where(v - t >= 0.5, 1, np.where(v - t <= -0.5, -1, 0))).astype(np.int64)


def divide_half_away_expr(total: E.PrimExpr, count: int) -> E.PrimExpr:
    """TIR of `divide_half_away_ref` for an int32 `total`."""
    half = E.const(count // 2, "int32")
    num = E.select(E.gt(total, E.const(0, "int32")), E.add(total, half), E.sub(total, half))
    return E.div(num, E.const(count, "int32"))  # C division truncates


def scaled_ref(v: np.ndarray, qe: tuple[int, int]) -> np.ndarray:
    """`multiply_ref` by one (Q31 multiplier, exponent) pair."""
    q, e = qe
    return multiply_ref(v, np.int64(q), np.int64(max(e, 0)), np.int64(max(-e, 0)))


def scaled_expr(v: E.PrimExpr, qe: tuple[int, int]) -> E.PrimExpr:
    """`multiply_expr` by one constant (Q31 multiplier, exponent) pair."""
    q, e = qe
    return multiply_expr(v, E.const(q, "int32"), E.const(e, "int32") if e > 0 else None, E.const(max(-e, 0), "int32"))
