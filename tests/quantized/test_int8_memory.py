"""The int8 activation bound and the planned pools of the MLPerf Tiny int8 models (compile time, no QEMU)."""

from __future__ import annotations

import logging

import onnx
import pytest

from tessera.frontend import from_onnx
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.testing.int8_bound import int8_activation_bound, layer_int8_bytes

logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice


def _model(name: str):
    return from_onnx(onnx.load(q8.model_path(name)))


def test_the_bound_is_the_largest_layers_int8_reads_and_writes():
    # kws: a depthwise conv on 64 channels of 25x5, in + out
    assert int8_activation_bound(*_model("kws_ds_cnn")) == 2 * 64 * 25 * 5 == 16_000
    # ic: a residual add reads two 16x32x32 tensors and writes a third
    mod, params = _model("ic_resnet8")
    layers = layer_int8_bytes(mod, params)
    assert max(layers, key=lambda t: t[1]) == ("qnn.add", 3 * 16 * 32 * 32)
    assert int8_activation_bound(mod, params) == 49_152
    # ad: the dense layer 640 -> 128 on the quantised input (the float input itself is the caller's)
    assert int8_activation_bound(*_model("ad_autoencoder")) == 640 + 128 == 768
    # vww: the pointwise conv 8 -> 16 channels at 48x48
    assert int8_activation_bound(*_model("vww_mobilenet")) == (8 + 16) * 48 * 48 == 55_296


def test_a_float_model_has_no_int8_bound():
    from tessera.testing import mlperf_tiny

    assert int8_activation_bound(*from_onnx(onnx.load(mlperf_tiny.model_path("ad_autoencoder")))) == 0
