"""Softmax along the last axis as one row kernel (op/nn/softmax_rows.py, codegen/c_rows.py) on AVX2 and
AVX-512 hosts, against NumPy and against the staged kernel other targets keep, with ragged rows, NaN
and infinities; other axes and targets keep the stages."""

from __future__ import annotations


import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op.nn import softmax
from tessera import te
from tessera.op.nn.softmax_rows import SOFTMAX_ROWS, softmax_rows
from tessera.op.schedule_context import ScheduleContext
from tessera.target import Target
from tessera.testing.isa import require_level

LEVELS = ["x86-64-v3", "x86-64-v4"]  # the AVX2 and the AVX-512 branch of the row kernel


def build(shape: tuple[int, ...], axis: int, target: str) -> tessera.GraphExecutorLibrary:
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    return tessera.build(relay.IRModule.from_expr(relay.Function([x], softmax.softmax(x, axis=axis))), target=target)


def numpy_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape", [(3, 1), (4, 7), (2, 3, 16), (5, 33), (12, 197, 197)])
def test_rows_match_numpy(level, shape):
    """Rows shorter than, equal to and ragged against the 16 lanes; the last shape runs on OpenMP threads."""
    require_level(level)
    lib = build(shape, -1, f"c -mcpu={level}")
    assert f"{SOFTMAX_ROWS}(" in "".join(lib.c_sources.values())
    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(np.float32)
    got = lib(x)[0]
    np.testing.assert_allclose(got, numpy_softmax(x, -1), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("level", LEVELS)
def test_nan_and_infinities_as_the_staged_kernel_has_them(level):
    """The staged kernel (kept on baseline x86-64) is the reference: a NaN row gives NaN, +inf gives NaN
    (inf - inf), -inf entries give 0, a row of -inf gives NaN."""
    require_level(level)
    x = np.random.default_rng(1).standard_normal((6, 37)).astype(np.float32)
    x[0, 20] = np.nan
    x[1, 3] = np.inf
    x[2, [0, 17, 36]] = -np.inf
    x[3, :] = -np.inf
    x[4, 32:] = 80.0  # the maximum in the scalar tail, past the vector part
    rows = build(x.shape, -1, f"c -mcpu={level}")(x)[0]
    staged_lib = build(x.shape, -1, "c -mcpu=x86-64")
    assert SOFTMAX_ROWS not in "".join(staged_lib.c_sources.values())
    staged = staged_lib(x)[0]
    np.testing.assert_array_equal(np.isnan(rows), np.isnan(staged))
    assert np.isnan(rows[[0, 1, 3]]).all() and (rows[2, [0, 17, 36]] == 0).all()
    np.testing.assert_allclose(rows, staged, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("target, rows", [("c -mcpu=x86-64-v3", True), ("c -mcpu=x86-64-v4", True),
                                          ("c -mcpu=x86-64", False), ("c -mcpu=cortex-m7", False)])
def test_other_axes_and_targets_keep_the_stages(target, rows):
    sched = ScheduleContext(Target(target))
    x = te.placeholder((4, 8, 5), "float32")
    out = relay.TensorType((4, 8, 5), "float32")
    assert softmax_rows(x, 1, out, sched) is None  # not the last axis
    assert (softmax_rows(x, 2, out, sched) is not None) == rows
    half = te.placeholder((4, 8, 5), "float16")
    assert softmax_rows(half, 2, relay.TensorType((4, 8, 5), "float16"), sched) is None


@pytest.mark.parametrize("level", LEVELS)
def test_one_and_two_threads_give_the_same_bits(level):
    require_level(level)
    lib = build((12, 197, 197), -1, f"c -mcpu={level}")
    x = np.random.default_rng(2).standard_normal((12, 197, 197)).astype(np.float32)
    one, two = (tessera.GraphModule(lib, num_threads=n)(x)[0] for n in (1, 2))
    assert np.array_equal(one, two)
