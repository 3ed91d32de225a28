"""Padded 2-d float32 max pools as one `ts_max_pool2d_float32` call (op/nn/pool_rows.py, C text in
codegen/c_pool.py), against the op's NumPy reference: the 3-wide stride-2 loop, other windows and strides,
asymmetric padding, ceil_mode windows running past the input, batches. Built for x86-64-v3 and -v4 on any
x86-64 host and run where this CPU has the level."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op.nn import pool
from tessera.op.nn.pool_rows import MAX_POOL_ROWS
from tessera.relay.expr import Call
from tessera.testing.isa import require_level

LEVELS = {"c -mcpu=x86-64-v3": "x86-64-v3", "c -mcpu=x86-64-v4": "x86-64-v4"}


def _pool(x_shape, kernel, strides, padding, ceil_mode=False):
    x = relay.Var("x", relay.TensorType(x_shape, "float32"))
    call = pool.max_pool2d(x, kernel=kernel, strides=strides, padding=padding, dilation=(1, 1), ceil_mode=ceil_mode)
    assert isinstance(call, Call)
    return relay.IRModule.from_expr(relay.Function([x], call)), call


def _calls_kernel(lib) -> bool:
    return f"{MAX_POOL_ROWS}(" in "".join(lib.c_sources.values()).replace(f"static void {MAX_POOL_ROWS}(", "")


@pytest.mark.parametrize("target", list(LEVELS))
@pytest.mark.parametrize("x_shape, kernel, strides, padding, ceil_mode", [
    ((1, 5, 17, 18), (3, 3), (2, 2), (1, 1, 1, 1), False),  # ResNet's stem pool, odd and even widths
    ((2, 3, 9, 40), (3, 3), (2, 2), (1, 1, 1, 1), True),  # ceil_mode: the last window runs past the input
    ((1, 4, 8, 7), (2, 2), (2, 2), (0, 1, 1, 0), False),  # asymmetric padding
    ((1, 2, 10, 11), (5, 3), (2, 3), (2, 1, 2, 1), False),  # other windows and strides
    ((1, 3, 6, 6), (3, 3), (1, 2), (1, 1, 1, 1), False),  # stride 1 down the rows
    ((1, 2, 3, 4), (3, 3), (2, 2), (2, 2, 2, 2), True),  # windows with a single input element
])
def test_padded_max_pools_call_the_row_kernel_and_match_numpy(x_shape, kernel, strides, padding, ceil_mode,
                                                               target):
    mod, call = _pool(x_shape, kernel, strides, padding, ceil_mode)
    lib = tessera.build(mod, target=target)
    assert _calls_kernel(lib)
    require_level(LEVELS[target])
    x = np.random.default_rng(7).standard_normal(x_shape).astype(np.float32)
    want = call.op.reference([x], call.attrs)
    got = lib(x)[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # a maximum is exact


@pytest.mark.parametrize("target", ["c -mcpu=x86-64-v4", "c -mcpu=x86-64"])
def test_unpadded_or_stride_one_pools_and_targets_without_avx2_keep_the_stages(target):
    unpadded, _ = _pool((1, 4, 13, 13), (3, 3), (2, 2), (0, 0, 0, 0))
    assert not _calls_kernel(tessera.build(unpadded, target=target))
    stride_one, _ = _pool((1, 4, 13, 13), (3, 3), (1, 1), (1, 1, 1, 1))
    assert not _calls_kernel(tessera.build(stride_one, target=target))
    if target.endswith("x86-64"):
        padded, call = _pool((1, 4, 13, 13), (3, 3), (2, 2), (1, 1, 1, 1))
        lib = tessera.build(padded, target=target)
        assert not _calls_kernel(lib)
        x = np.random.default_rng(8).standard_normal((1, 4, 13, 13)).astype(np.float32)
        np.testing.assert_array_equal(lib(x)[0], call.op.reference([x], call.attrs))
