"""Elementwise tails of convolutions and matrix products: the clamps (Clip, Relu6,
hard sigmoid) after inlining, and whole models checked against onnxruntime,
including NaN, signed zeros and infinities in the producer's output."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend.onnx import from_onnx
from tessera.op import elemwise_rules as R
from tessera.target import Target
from tessera.target.builtin import c_toolchain
from tessera.testing import tail_blocks
from tessera.testing.models import data_input, ort_run, seeded_input
from tessera.tir import expr as E
from tessera.tir.buffer import Buffer
from tessera.tir.clamp_select import single_compare_clamps
from tessera.tir.structural import assert_structural_equal

EDGES = np.array([np.nan, -np.nan, -0.0, 0.0, 6.0, -1.0, 3.0, 7.0, np.inf, -np.inf, 1e30, -1e-45], np.float32)


def _x() -> E.PrimExpr:
    return E.BufferLoad(Buffer("x", (4,), "float32"), (E.IntImm(0),), "float32")


# ----------------------------------------------------------- clamp_select, before/after
def test_max_and_min_against_a_constant_become_one_comparison() -> None:
    x, zero, six = _x(), E.const(0, "float32"), E.const(6, "float32")
    relu6 = R.minimum(R.maximum(x, zero), six)
    lower = E.select(E.le(x, zero), zero, x)
    expected = E.select(E.ge(lower, six), six, lower)
    assert_structural_equal(single_compare_clamps(relu6), expected)


def test_constant_first_clamps_drop_the_folded_nan_test() -> None:
    x, one = _x(), E.const(1, "float32")
    assert_structural_equal(single_compare_clamps(R.minimum(one, x)), E.select(E.lt(one, x), one, x))
    assert_structural_equal(single_compare_clamps(R.maximum(one, x)), E.select(E.gt(one, x), one, x))


@pytest.mark.parametrize("bound", [E.const(float("nan"), "float32"), None])
def test_nan_bounds_and_tensor_operands_keep_the_nan_aware_rule(bound: E.PrimExpr | None) -> None:
    x = _x()
    other = bound if bound is not None else E.BufferLoad(Buffer("y", (4,), "float32"), (E.IntImm(0),), "float32")
    rule = R.maximum(x, other)
    assert single_compare_clamps(rule) is rule or single_compare_clamps(rule) == rule


# ---------------------------------------------------------------- models vs onnxruntime
def _conv_tail_model(tail: list[helper.NodeProto], inits: list, channels: int = 4, hw: int = 6):
    """x -> 1x1 Conv (identity weights, so x's values reach the tail unchanged) -> tail -> y."""
    weight = np.eye(channels, dtype=np.float32).reshape(channels, channels, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), *tail]
    graph = helper.make_graph(
        nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, hw, hw])],
        [numpy_helper.from_array(weight, "w"), *inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _edge_input(channels: int = 4, hw: int = 6) -> np.ndarray:
    x = np.random.default_rng(3).standard_normal((1, channels, hw, hw)).astype(np.float32) * 4
    flat = x.reshape(-1)
    flat[: EDGES.size] = EDGES
    return x


def _bound(name: str, value: float):
    return numpy_helper.from_array(np.array(value, np.float32), name)


CLAMP_TAILS = {
    "clip": ([helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], [_bound("lo", 0), _bound("hi", 6)]),
    "clip_min_above_max": ([helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], [_bound("lo", 2), _bound("hi", 1)]),
    "hard_sigmoid": ([helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.3, beta=0.4)], []),
    "hard_swish": ([helper.make_node("HardSwish", ["c"], ["y"])], []),
}


@pytest.mark.parametrize("name", sorted(CLAMP_TAILS))
def test_conv_clamp_epilogues_match_onnxruntime(name: str) -> None:
    model = _conv_tail_model(*CLAMP_TAILS[name])
    x = _edge_input()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    (kernel,) = [src for key, src in lib.c_sources.items() if "conv2d" in src and key.startswith("kernels")]
    assert "||" not in kernel  # one comparison per clamp: the epilogue loop vectorises
    got = lib(x)[0]
    ref = ort_run(model, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))  # NaN propagates as in onnxruntime
    if name.startswith("clip"):  # no arithmetic: bit for bit, signed zeros included
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))
    else:  # alpha * x + beta may contract to one FMA
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7, equal_nan=True)


# ------------------------------------------------------- the benchmark's tail blocks
SMALL_BLOCKS = {
    "mobilenet_v2_block": lambda: tail_blocks.mobilenet_v2_block(channels=8, expand=3, size=10),
    "mobilenet_v3_block": lambda: tail_blocks.mobilenet_v3_block(channels=8, expand=3, size=10),
    "efficientnet_block": lambda: tail_blocks.efficientnet_block(channels=8, expand=3, size=10),
    "gpt2_mlp": lambda: tail_blocks.gpt2_mlp(tokens=6, width=16),
}


@pytest.mark.parametrize("name", sorted(tail_blocks.BLOCKS))
def test_tail_blocks_fuse_every_tail_and_match_onnxruntime(name: str) -> None:
    model = SMALL_BLOCKS[name]()
    onnx.checker.check_model(model, full_check=True)
    input_name, shape = data_input(model)
    x = seeded_input(shape, seed=2)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    producers = sum(n.op_type in ("Conv", "MatMul") for n in model.graph.node)
    kernels = [k for k in lib.module.function_names if k.startswith("tsgen_default_fused")]
    assert len(kernels) == producers, kernels  # one kernel per producer: every tail runs in its epilogue
    np.testing.assert_allclose(lib(x)[0], ort_run(model, {input_name: x})[0], rtol=1e-4, atol=1e-5)


LEAKY_TAIL = ([helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)], [])


@pytest.mark.parametrize("target", ["c -mcpu=x86-64-v3", "c -mcpu=x86-64-v4"])
def test_every_epilogue_loop_vectorises(target: str, tmp_path) -> None:
    """Compiled with the target's own flags (AVX2, AVX-512), each loop storing a kernel's output
    becomes vector code: clamps, LeakyRelu's x * alpha arm, HardSwish, SiLU, GELU; as does each map a GEMM
    runs on its blocks of C (te/gemm_epilogue.py: `c[q] = f(v)`)."""
    models = {name: build() for name, build in tail_blocks.BLOCKS.items()}  # full size: the benchmark's schedules
    models["leaky_relu"] = _conv_tail_model(*LEAKY_TAIL)
    toolchain = c_toolchain(Target(target))
    checked: dict[str, int] = {}
    for name, model in models.items():
        mod, params = from_onnx(model)
        source = tessera.build(mod, target=target, params=params).c_sources["kernels_0.c"]
        path = tmp_path / f"{name}.c"
        path.write_text(source)
        flags = [f for f in toolchain.object_flags() if f not in ("-Werror", "-fPIC")]
        report = subprocess.run([toolchain.cc, *flags, "-c", str(path), "-o", str(tmp_path / f"{name}.o"),
                                 "-fopt-info-vec-optimized"], capture_output=True, text=True, check=True).stderr
        vectorised = {int(n) for n in re.findall(rf"{name}\.c:(\d+):\d+: optimized: loop vectorized", report)}
        stores = [k + 1 for k, line in enumerate(source.splitlines()) if re.match(r"\s*(out\[|c\[q\] = )", line)]
        # the store's own loop, or (short rows) one of the two around it; a block whose tails all run inside
        # their kernels' calls (MobileNetV2's bias and ReLU6) has no such loop
        assert all(vectorised & {k - 1, k - 2, k - 3} for k in stores), (name, stores, sorted(vectorised))
        checked[name] = len(stores)
    # every block with a tail the calls cannot run (hard-swish, SiLU, GELU, LeakyRelu) has its loops checked
    assert all(count for name, count in checked.items() if name != "mobilenet_v2_block"), checked
