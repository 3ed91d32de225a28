"""Host code for each x86-64 ISA level (`c -mcpu=x86-64-v2/v3/v4`), so one machine tests the SSE, AVX2
and AVX-512 code paths: the generated C is checked for every level, and run where this CPU has the level."""

from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest

import tessera
from tessera.codegen.c_library import LIBRARY_MACRO
from tessera import relay
from tessera.errors import RuntimeExecutionError
from tessera.frontend import from_onnx
from tessera.op.nn import conv, matmul
from tessera.runtime.graph_executor import GraphModule
from tessera.target import Target
from tessera.target.simd import X86_64_LEVELS, float32_lanes, host_arch, missing_level_features
from tessera.testing import mlperf_tiny as mt
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.testing.models import ort_run
from tessera.testing.isa import require_level

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 ISA levels need an x86-64 host")
LEVELS = ["x86-64-v2", "x86-64-v3", "x86-64-v4"]
LANES = {"x86-64-v2": 4, "x86-64-v3": 8, "x86-64-v4": 16}  # float32 per SSE / AVX2 / AVX-512 register


def conv_and_matmul() -> relay.Function:
    x = relay.Var("x", relay.TensorType((1, 8, 10, 20), "float32"))
    w = relay.Var("w", relay.TensorType((16, 8, 3, 3), "float32"))
    a = relay.Var("a", relay.TensorType((32, 32), "float32"))
    body = relay.Tuple((conv.conv2d(x, w, strides=(1, 1), padding=(1,) * 4, dilation=(1, 1)), matmul.matmul(a, a)))
    return relay.Function((x, w, a), body)


@pytest.mark.parametrize("level", LEVELS)
def test_levels_are_gcc_march_values_with_their_vector_width(level):
    target = Target(f"c -mcpu={level}")
    assert host_arch(target) == level and float32_lanes(target) == LANES[level]
    toolchain = target.kind.toolchain(target)
    assert f"-march={level}" in toolchain.cflags and not any(f.startswith("-mcpu") for f in toolchain.cflags)


@pytest.mark.parametrize("target", ["c", *(f"c -mcpu={level}" for level in LEVELS)])
def test_conv_register_tile_follows_the_vector_width(target):
    """8 output channels (4 with AVX2's 16 registers) x two vector registers of positions (clamped to 16..32
    positions)."""
    lib = tessera.build(relay.IRModule.from_expr(conv_and_matmul()), target=target)
    source = "".join(lib.c_sources.values())
    lanes = float32_lanes(Target(target))
    width = min(max(2 * lanes, 16), 32)
    # the matmul: a packed-panel GEMM (6x16 AVX2, 8x32 AVX-512 for its 32 rows) where there are 8 lanes or more
    matmul_code = {4: "float matmul_tile[", 8: f"{LIBRARY_MACRO} void ts_sgemm_6x16(",
                   16: f"{LIBRARY_MACRO} void ts_sgemm_8x32("}
    channels = 4 if lanes == 8 else 8
    assert f"float conv2d_tile[{channels * width}];" in source and matmul_code[lanes] in source


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_computes_the_same_numbers(level):
    require_level(level)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype(np.float32) for shape in ((1, 8, 10, 20), (16, 8, 3, 3), (32, 32))]
    reference = tessera.build(relay.IRModule.from_expr(conv_and_matmul()), target="c -mcpu=x86-64")(*args)
    outputs = tessera.build(relay.IRModule.from_expr(conv_and_matmul()), target=f"c -mcpu={level}")(*args)
    for got, want in zip(outputs, reference):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_runs_a_model_like_onnxruntime(level):
    require_level(level)
    model = mt.build("kws_ds_cnn")
    x = mt.sample_input("kws_ds_cnn")
    mod, params = from_onnx(model)
    y = tessera.build(mod, target=f"c -mcpu={level}", params=params)(x)[0]
    np.testing.assert_allclose(y, ort_run(model, {"input": x})[0], rtol=1e-3, atol=1e-4)


def test_code_for_a_level_this_cpu_lacks_refuses_to_run():
    lacking = [level for level in LEVELS if missing_level_features(level)]
    if not lacking:
        pytest.skip("this CPU has every x86-64 level up to v4, so there is no level it cannot run")
    lib = tessera.build(relay.IRModule.from_expr(conv_and_matmul()), target=f"c -mcpu={lacking[0]}")
    with pytest.raises(RuntimeExecutionError, match="compiled for CPUs with .*which this CPU lacks.*x86-64-v"):
        GraphModule(lib)


def test_levels_nest():
    names = list(X86_64_LEVELS)
    for lower, higher in zip(names, names[1:]):
        assert X86_64_LEVELS[lower] < X86_64_LEVELS[higher]


def test_model_export_keeps_the_cpu_check(tmp_path):
    """A library exported and loaded again still checks the CPU before running."""
    lib = tessera.build(relay.IRModule.from_expr(conv_and_matmul()), target="c -mcpu=x86-64-v2")
    loaded = tessera.load_module(lib.export_library(tmp_path / "m.so"))
    assert loaded.shared_library.has_symbol("TSMissingCpuFeature")
    loaded.shared_library.check_cpu()  # every x86-64 CPU tessera runs on has SSE4.2


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_runs_int8_kernels_bit_exact(level):
    """Integer kernels vectorise differently per level; every level must give ONNX's exact answer."""
    require_level(level)
    model = onnx.load(q8.model_path("kws_ds_cnn"))
    x = mt.sample_input("kws_ds_cnn")
    mod, params = from_onnx(model)
    y = tessera.build(mod, target=f"c -mcpu={level}", params=params)(x)[0]
    np.testing.assert_array_equal(y, ort_run(model, {"input": x}, optimize=False)[0])
