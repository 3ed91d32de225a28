"""LiteRT's int8 HARD_SWISH arithmetic (int16 fixed point), as a table over the 256 input bytes."""

from __future__ import annotations

import numpy as np

from ....op.qnn_rounding import quantize_multiplier

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


def _to_int16_multiplier(q31: int) -> int:
    """DownScaleInt32ToInt16Multiplier: the Q31 multiplier rounded to Q15."""
    if q31 >= (1 << 31) - 1 - (1 << 15):
        return INT16_MAX
    return (q31 + (1 << 15)) >> 16


def _rounding_doubling_high_mul(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int16: round half up at bit 15."""
    ab = a.astype(np.int64) * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.trunc((ab + nudge) / (1 << 15)).astype(np.int64)
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, q)


def _doubling_high_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """LiteRT's SaturatingDoublingHighMul on int16: truncating division by 2^15."""
    ab = a.astype(np.int64) * b.astype(np.int64)
    q = np.trunc(ab / (1 << 15)).astype(np.int64)
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, q)


def _rounding_divide(x: np.ndarray, exponent: int) -> np.ndarray:
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def _saturating_left_shift(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * (1 << amount), INT16_MIN, INT16_MAX)


def hard_swish_table(s_in: float, z_in: int, s_out: float, z_out: int) -> np.ndarray:
    hires_scale = np.float32(1.0 / 128.0) * np.float32(s_in)
    out_q, out_e = quantize_multiplier(float(hires_scale / np.float32(s_out)))
    relu_q, relu_e = quantize_multiplier(float(hires_scale / np.float32(3.0 / 32768.0)))
    if out_e > 0:
        raise ValueError("HARD_SWISH: the output scale is too small for LiteRT's arithmetic")
    out_m16, relu_m16 = _to_int16_multiplier(out_q), _to_int16_multiplier(relu_q)
    x = np.arange(-128, 128, dtype=np.int64) - z_in
    hires = x * (1 << 7)
    preshift = _rounding_doubling_high_mul(hires, out_m16)
    reluish = hires
    if relu_e > 0:
        reluish = _saturating_left_shift(reluish, relu_e - 1)
    reluish = _rounding_doubling_high_mul(reluish, relu_m16)
    if relu_e > 0:
        reluish = _saturating_left_shift(reluish, 1)
    if relu_e < 0:
        reluish = _rounding_divide(reluish, -relu_e)
    reluish = (reluish + (1 << 15)) >> 1
    y = _rounding_divide(_doubling_high_mul(reluish, preshift), -out_e) + z_out
    return np.clip(y, -128, 127)
