"""2-d pools on AVX2 / AVX-512 hosts: the window kernel that tests only its border (op/nn/pool_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op.nn import pool
from tessera.op.nn.pool_rows import MIN_ROW, Pool2dKernel
from tessera.testing.isa import require_level

STAGES = "c -mcpu=x86-64-v2"  # 4 float32 lanes: keeps the staged kernel, the reference here


def _pool(kind: str, shape, **attrs) -> relay.IRModule:
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    op = pool.max_pool2d if kind == "max" else pool.avg_pool2d
    attrs.setdefault("dilation", (1, 1))
    return relay.IRModule.from_expr(relay.Function((x,), op(x, **attrs)))


def _kernel_calls(lib) -> list[str]:
    return sorted({word for src in lib.c_sources.values() for word in src.replace("(", " ").split()
                   if Pool2dKernel.from_symbol(word) is not None})


CASES = [  # (kind, input shape, attributes): all padded, with output rows of MIN_ROW or more
    ("max", (1, 3, 40, 40), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),  # ResNet's stem pool
    ("max", (2, 2, 19, 35), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))),  # Inception's, odd sizes
    ("max", (1, 2, 33, 37), dict(kernel=(3, 2), strides=(2, 2), padding=(0, 1, 1, 0), ceil_mode=True)),
    ("max", (1, 1, 20, 50), dict(kernel=(5, 5), strides=(3, 3), padding=(2, 2, 2, 2))),
    ("avg", (1, 3, 36, 36), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),
    ("avg", (1, 3, 36, 36), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=True)),
    ("avg", (1, 2, 17, 40), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), count_include_pad=True)),
    ("avg", (1, 2, 33, 41), dict(kernel=(2, 3), strides=(2, 2), padding=(1, 0, 1, 1), ceil_mode=True,
                                 count_include_pad=True)),
]


@pytest.mark.parametrize(("kind", "shape", "attrs"), CASES)
@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_the_kernel_gives_the_staged_results(kind, shape, attrs, level):
    mod = _pool(kind, shape, **attrs)
    lib = tessera.build(mod, target=f"c -mcpu={level}")
    (symbol,) = _kernel_calls(lib)
    assert Pool2dKernel.from_symbol(symbol) == Pool2dKernel(kind == "avg", attrs["kernel"], attrs["strides"])
    require_level(level)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    staged = tessera.build(mod, target=STAGES)
    assert not _kernel_calls(staged)
    # the same taps in the same order: the same bits (the reference op agrees to rounding)
    np.testing.assert_array_equal(lib(x)[0], staged(x)[0])
    call = mod["main"].body
    np.testing.assert_allclose(lib(x)[0], call.op.reference([x], call.attrs), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("kind", "shape", "attrs"), [
    ("max", (1, 4, 32, 32), dict(kernel=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0))),  # no padding: no test to save
    ("max", (1, 4, 28, 28), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),  # rows of 14 < MIN_ROW
    ("avg", (1, 4, 32, 32), dict(kernel=(3, 3), strides=(1, 1), padding=(2, 2, 2, 2), dilation=(2, 2))),
])
def test_pools_the_kernel_does_not_pay_for_keep_their_stages(kind, shape, attrs):
    assert MIN_ROW > 14
    assert not _kernel_calls(tessera.build(_pool(kind, shape, **attrs), target="c -mcpu=x86-64-v3"))


def test_windows_wholly_in_the_padding():
    """Padding as wide as the window: the first and last rows and columns of windows hold no input. Their
    max is -inf and their average 0 (nothing counted), as the stages give."""
    attrs = dict(kernel=(3, 3), strides=(1, 1), padding=(3, 3, 3, 3))
    x = np.random.default_rng(1).standard_normal((1, 2, 20, 20)).astype(np.float32)
    for kind, empty in (("max", -np.inf), ("avg", 0.0)):
        mod = _pool(kind, x.shape, **attrs)
        lib = tessera.build(mod)
        y = lib(x)[0]
        assert y[0, 0, 0, 0] == y[0, 1, -1, -1] == empty
        np.testing.assert_array_equal(y, tessera.build(mod, target=STAGES)(x)[0])
