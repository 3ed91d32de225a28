"""The MLPerf Tiny int8 .tflite models: bit-exact with LiteRT on the host and on an emulated Cortex-M4."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tessera
from tessera.frontend import from_tflite
from tessera.testing.litert import MLPERF_TINY, mlperf_tiny_path, run_litert, seeded_inputs

logging.getLogger().setLevel(logging.ERROR)


@pytest.mark.parametrize("name", MLPERF_TINY)
def test_mlperf_tiny_tflite_bit_exact_on_host(name, record_property):
    record_property("suite", "MLPerf Tiny int8 TFLite, host")
    path = mlperf_tiny_path(name)
    mod, params = from_tflite(path)
    ty = mod["main"].params[0].checked_type
    assert ty.dtype == "int8"  # int8 in and out, as the published models
    lib = tessera.build(mod, params=params)
    for seed in range(3):
        xs = seeded_inputs(path, seed)
        np.testing.assert_array_equal(lib(*xs)[0], run_litert(path, xs)[0])


BOARDS = {"mps2-an386": "c -mcpu=cortex-m4", "mps2-an500": "c -mcpu=cortex-m7", "mps3-an547": "c -mcpu=cortex-m55"}


@pytest.mark.parametrize("name", MLPERF_TINY)
def test_mlperf_tiny_tflite_bit_exact_on_boards(name, record_property):
    record_property("suite", "MLPerf Tiny int8 TFLite, AOT on Cortex-M4/M7/M55")
    path = mlperf_tiny_path(name)
    mod, params = from_tflite(path)
    xs = seeded_inputs(path, 0)
    expected = run_litert(path, xs)[0]
    for board, target in BOARDS.items():
        lib = tessera.build(mod, target=target, params=params, executor="aot", mod_name=name)
        outputs, run = lib.run_board(board, xs)
        np.testing.assert_array_equal(outputs[0], expected, err_msg=board)
        assert run.sizes.flash > lib.program.params_size
