"""Means over contiguous runs as one `ts_row_means_float32` call (op/row_means.py, C text in codegen/c_rows.py):
average pools of one unpadded window spanning all but the first spatial axis (`mean` over trailing axes keeps
its stages, with partial sums: tests/op/test_reduce.py). Built for x86-64-v3 and -v4 on any x86-64 host, run where this CPU has the level, and
compared with NumPy in float64."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op import reduce as red
from tessera.op.nn import pool
from tessera.op.row_means import ROW_MEANS
from tessera.testing.isa import require_level

LEVELS = {"c -mcpu=x86-64-v3": "x86-64-v3", "c -mcpu=x86-64-v4": "x86-64-v4"}


def _build(x_shape: tuple[int, ...], make, target: str):
    x = relay.Var("x", relay.TensorType(x_shape, "float32"))
    return tessera.build(relay.IRModule.from_expr(relay.Function([x], make(x))), target=target)


def _run(lib, x_shape: tuple[int, ...], level: str) -> tuple[np.ndarray, np.ndarray]:
    require_level(level)
    x = np.random.default_rng(len(x_shape)).standard_normal(x_shape).astype(np.float32) + 1.0
    return x, lib(x)[0]


def _calls_row_means(lib) -> bool:
    return f"{ROW_MEANS}(" in "".join(lib.c_sources.values()).replace(f"static void {ROW_MEANS}(", "")


@pytest.mark.parametrize("target", list(LEVELS))
@pytest.mark.parametrize("shape, kernel", [
    ((1, 64, 25, 5), (24, 5)),  # KWS: one 24 x 5 window (its stride) over 25 x 5, the last row left out
    ((2, 33, 7, 7), (7, 7)),  # a global pool written as AveragePool
    ((1, 3, 4, 6, 5), (3, 6, 5)),  # 3-d
])
def test_average_pools_of_one_contiguous_window_call_the_row_kernel(shape, kernel, target):
    d = len(kernel)
    ops = {2: pool.avg_pool2d, 3: pool.avg_pool3d}
    lib = _build(shape, lambda a: ops[d](a, kernel=kernel, strides=kernel, padding=(0,) * (2 * d),
                                         dilation=(1,) * d), target)
    assert _calls_row_means(lib)
    x, got = _run(lib, shape, LEVELS[target])
    window = x[(slice(None), slice(None), *(slice(0, k) for k in kernel))].astype(np.float64)
    want = window.mean(axis=tuple(range(2, 2 + d)), keepdims=True)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda a: red.mean(a, axes=(1,), keepdims=True),  # not the trailing axes: strided runs
    lambda a: red.mean(a, axes=(2, 3), keepdims=True),  # a mean op: stages with partial sums, fusing its producer
    lambda a: pool.avg_pool2d(a, kernel=(3, 4), strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)),
    lambda a: pool.avg_pool2d(a, kernel=(7, 5), strides=(1, 1), padding=(1, 0, 0, 0), dilation=(1, 1)),
    lambda a: pool.avg_pool2d(a, kernel=(2, 5), strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)),
])
def test_other_means_keep_the_staged_reduction(make):
    lib = _build((1, 4, 6, 5), make, "c -mcpu=x86-64-v4")
    assert not _calls_row_means(lib)


def test_targets_without_avx2_keep_the_staged_reduction():
    lib = _build((1, 8, 7, 7), lambda a: red.mean(a, axes=(2, 3), keepdims=True), "c -mcpu=x86-64")
    assert not _calls_row_means(lib)
    x, got = _run(lib, (1, 8, 7, 7), "x86-64")
    np.testing.assert_allclose(got, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5)
