"""LiteRT's integer arithmetic (op/qnn_rounding.py): NumPy references against a literal Python transcription,
and the generated C against the references, including the edges the models rarely reach."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera
from tessera.op import qnn
from tessera.op.qnn_rounding import Rounding, divide_half_away_ref, multiplier_table, multiply_ref, quantize_multiplier
from tessera.relay.expr import Call, Constant, Function, Var
from tessera.relay.module import IRModule
from tessera.relay.ty import TensorType


def _c_div(a: int, b: int) -> int:
    """C's integer division (toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _literal(x: int, q: int, shift: int) -> int:
    """MultiplyByQuantizedMultiplier written as LiteRT's C reads, with Python integers."""
    left, right = max(shift, 0), max(-shift, 0)
    a = x * (1 << left)
    ab = a * q
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    high = _c_div(ab + nudge, 1 << 31)
    mask = (1 << right) - 1
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if (high & mask) > threshold else 0)


def test_quantize_multiplier_is_frexp_rounded_to_q31():
    for real in (0.5, 0.75, 1.0, 3.0, 2.0**-20, 0.0123456789, 1.0 - 2.0**-40):
        q, e = quantize_multiplier(real)
        assert 2**30 <= q < 2**31 and abs(q * 2.0 ** (e - 31) - real) <= 2.0 ** (e - 32)
    assert quantize_multiplier(1.0 - 2.0**-40) == (1 << 30, 1)  # rounds up to 2^31: halved, exponent + 1
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(2.0**-40) == (0, 0)  # below LiteRT's smallest exponent


def test_multiply_matches_the_literal_transcription():
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.integers(-2**20, 2**20, 400), np.arange(-300, 300)])
    for real in (0.3, 0.000731, 0.5, 1.7, 5.25, 2.0**-9):
        q, e = quantize_multiplier(real)
        got = multiply_ref(xs, q, max(e, 0), max(-e, 0))
        want = [_literal(int(x), q, e) for x in xs]
        assert got.tolist() == want, real


def test_divide_half_away_from_zero():
    total = np.array([-7, -6, -5, -4, 4, 5, 6, 7, 0])
    assert divide_half_away_ref(total, 4).tolist() == [-2, -2, -1, -1, 1, 1, 2, 2, 0]
    assert divide_half_away_ref(np.array([-3, 3, -2, 2]), 2).tolist() == [-2, 2, -1, 1]


@pytest.mark.parametrize("reals", [
    [0.0031, 0.0007, 0.011, 0.0002],  # right shifts of 6..12
    [1.5, 0.75, 3.0, 0.5],  # left shifts, and a right shift of 0
])
def test_generated_dense_equals_its_reference(reals):
    """qnn.dense with a (3, C) multiplier table, built to C, against the NumPy reference, for every int8 input."""
    rng = np.random.default_rng(1)
    channels, depth = len(reals), 6
    w = rng.integers(-127, 128, (channels, depth), dtype=np.int8)
    bias = rng.integers(-2000, 2000, channels).astype(np.int32)
    table = multiplier_table(np.asarray(reals))
    x = Var("x", TensorType((256, depth), "int8"))
    attrs = qnn.QDenseAttrs(3, qnn.Requant(31, -5, -100, 120, Rounding.TFLITE, left_shifts=bool(np.any(table[1]))))
    call = Call(qnn.qdense, (x, Constant(w), Constant(bias), Constant(table)), attrs)
    lib = tessera.build(IRModule.from_expr(Function((x,), call)))
    values = np.repeat(np.arange(-128, 128, dtype=np.int8)[:, None], depth, axis=1)
    values[:, ::2] = rng.integers(-128, 128, (256, math.ceil(depth / 2)), dtype=np.int8)
    want = qnn.qdense.reference([values, w, bias, table], attrs)
    np.testing.assert_array_equal(lib(values)[0], want)
    assert want.min() >= -100 and want.max() <= 120
