"""The TFLite importer, one operator at a time, against LiteRT's reference kernels."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tessera
from tessera.frontend import from_tflite
from tessera.testing.litert import DATA, run_litert, seeded_inputs

logging.getLogger().setLevel(logging.ERROR)
OPS = sorted(p.name.split(".")[0] for p in (DATA / "ops").glob("*.float.tflite"))


def _run(path, seeds=(0, 1)):
    mod, params = from_tflite(path)
    lib = tessera.build(mod, params=params)
    for seed in seeds:
        xs = seeded_inputs(path, seed)
        yield lib(*xs), run_litert(path, xs)


@pytest.mark.parametrize("name", OPS)
def test_float_operator_matches_litert(name):
    for got, want in _run(DATA / "ops" / f"{name}.float.tflite"):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", OPS)
def test_int8_operator_is_bit_exact(name):
    """Full-integer models with float input and output: QUANTIZE, the int8 op, DEQUANTIZE."""
    path = DATA / "ops" / f"{name}.int8.tflite"
    for got, want in _run(path, seeds=range(8)):  # rare ties decide between roundings: several inputs
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_int8_ops_become_integer_kernels():
    """Convolutions, dense and add of an int8 model run as qnn kernels, not float."""
    from tessera.relay.visitor import iter_calls
    from tessera.transform.quantize_to_integer import quantize_to_integer

    names = set()
    for op in ("conv_2d", "depthwise_conv_2d", "fully_connected", "add", "mul", "average_pool_2d"):
        mod, _ = from_tflite(DATA / "ops" / f"{op}.int8.tflite")
        names |= {c.op.name for c in iter_calls(quantize_to_integer(mod["main"], mod).body)}
    assert {"qnn.conv2d", "qnn.dense", "qnn.add", "qnn.mul", "qnn.avg_pool2d"} <= names
    assert not names & {"nn.conv2d", "nn.dense", "add", "multiply", "nn.avg_pool2d"}
