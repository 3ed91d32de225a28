"""2-d pools on AVX2 / AVX-512 hosts: the kernel made for one pool's shapes, over padded bands (op/nn/pool_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op.nn import pool
from tessera.op.nn.pool_rows import BAND_FLOATS, Pool2dKernel
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


CASES = [  # (kind, input shape, attributes)
    ("max", (1, 3, 40, 40), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),  # ResNet's stem pool
    ("max", (2, 2, 19, 35), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))),  # Inception's, odd sizes
    ("max", (1, 2, 33, 37), dict(kernel=(3, 2), strides=(2, 2), padding=(0, 1, 1, 0), ceil_mode=True)),
    ("max", (1, 1, 20, 50), dict(kernel=(5, 5), strides=(3, 3), padding=(2, 2, 2, 2))),
    ("avg", (1, 3, 36, 36), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),
    ("avg", (1, 3, 36, 36), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), count_include_pad=True)),
    ("avg", (1, 2, 17, 40), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), count_include_pad=True)),
    ("avg", (1, 2, 33, 41), dict(kernel=(2, 3), strides=(2, 2), padding=(1, 0, 1, 1), ceil_mode=True,
                                 count_include_pad=True)),
    ("avg", (1, 5, 14, 14), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))),  # Inception's short rows
    ("max", (1, 5, 13, 13), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))),
    ("avg", (2, 3, 7, 7), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), count_include_pad=True)),
    ("max", (1, 3, 55, 55), dict(kernel=(3, 3), strides=(2, 2), padding=(0, 0, 0, 0))),  # SqueezeNet's, unpadded
    ("max", (1, 3, 28, 28), dict(kernel=(3, 3), strides=(2, 2), padding=(0, 0, 1, 1), ceil_mode=True)),
    ("max", (1, 5, 90, 90), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))),  # several bands a plane
    ("avg", (1, 5, 150, 150), dict(kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),
]


@pytest.mark.parametrize(("kind", "shape", "attrs"), CASES)
@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_the_kernel_gives_the_staged_results(kind, shape, attrs, level):
    mod = _pool(kind, shape, **attrs)
    lib = tessera.build(mod, target=f"c -mcpu={level}")
    (symbol,) = _kernel_calls(lib)
    kernel = Pool2dKernel.from_symbol(symbol)
    assert kernel is not None and kernel.symbol == symbol
    assert (kernel.average, kernel.kernel, kernel.strides) == (kind == "avg", attrs["kernel"], attrs["strides"])
    assert (kernel.counted_end is not None) == bool(attrs.get("count_include_pad"))
    require_level(level)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    staged = tessera.build(mod, target=STAGES)
    assert not _kernel_calls(staged)
    # the same taps in the same order: the same bits (the reference op agrees to rounding)
    np.testing.assert_array_equal(lib(x)[0], staged(x)[0])
    call = mod["main"].body
    np.testing.assert_allclose(lib(x)[0], call.op.reference([x], call.attrs), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("kind", "shape", "attrs"), [
    ("max", (1, 4, 32, 32), dict(kernel=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0))),  # tiles: read in place
    ("avg", (1, 4, 32, 32), dict(kernel=(3, 3), strides=(1, 1), padding=(2, 2, 2, 2), dilation=(2, 2))),
    ("max", (1, 1, 4, BAND_FLOATS // 3), dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))),  # too wide
])
def test_pools_the_kernel_does_not_pay_for_keep_their_stages(kind, shape, attrs):
    assert not _kernel_calls(tessera.build(_pool(kind, shape, **attrs), target="c -mcpu=x86-64-v3"))


def test_the_kernel_symbol_names_every_size_it_is_made_for():
    kernel = Pool2dKernel(True, (3, 2), (2, 1), (15, 14), (8, 15), (1, 0), (1, 2))
    assert Pool2dKernel.from_symbol(kernel.symbol) == kernel
    assert Pool2dKernel.from_symbol(Pool2dKernel(False, (3, 3), (1, 1), (7, 7), (7, 7), (1, 1)).symbol).counted_end is None
    assert Pool2dKernel.from_symbol("ts_pool2d_max_3x3_s1x1_float32") is None  # the old, size-free name


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
