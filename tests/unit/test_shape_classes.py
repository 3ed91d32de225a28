"""Compile-time savings (issue 16): shape classes, balanced translation units, memory planning by sweep.

Kernels whose C differs only in integer constants share one function
(`codegen/c_shape_class.py`); the model still computes the same numbers,
and the C is the same bytes on every build.
"""

from __future__ import annotations

import random
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.backend.memory_plan import BufferInfo, conflict_lists, plan_memory
from tessera.codegen.c_host import SHAPE_CLASSES_CONFIG, _balanced_units, _Piece
from tessera.codegen.c_shape_class import SHARED_MACRO, shape_classes, shared_source, skeleton
from tessera.errors import TesseraError
from tessera.frontend import from_onnx
from tessera.transform import PassContext


def _kernel(name: str, channels: int, inner: int = 28, divisor: int = 7) -> str:
    return (f"TS_EXPORT int32_t {name}(const float* restrict p0, float* restrict out) {{\n"
            f"  for (int32_t c = 0; c < {channels}; ++c) {{\n"
            f"    for (int32_t i = 0; i < {inner}; ++i) {{\n"
            f"      out[((c * {inner}) + i)] = p0[((c * {inner}) + (i / {divisor}))] + 1.0f;\n"
            "    }\n"
            "  }\n"
            "  return 0;\n"
            "}")


def test_kernels_differing_in_an_outer_bound_share_one_function():
    texts = [_kernel("k_a", 64), _kernel("k_b", 96), _kernel("k_c", 64)]
    assert shape_classes(texts) == [[0, 1, 2]]
    members = [skeleton(t) for t in texts]
    assert all(m is not None for m in members)
    name, text = shared_source([m for m in members if m is not None], set())
    assert text.count(f"{SHARED_MACRO} int32_t {name}(") == 1
    assert f"int32_t {name}(const float* restrict p0, float* restrict out, int32_t ts_shape_0)" in text
    assert "c < ts_shape_0" in text and "i < 28" in text and "i / 7" in text  # only the channels vary
    for kernel, channels in (("k_a", 64), ("k_b", 96), ("k_c", 64)):
        assert f"TS_EXPORT int32_t {kernel}(const float* restrict p0, float* restrict out) {{\n" \
               f"  return {name}(p0, out, {channels});\n}}" in text


def test_the_vector_loop_bound_and_divisors_stay_constant():
    assert shape_classes([_kernel("k_a", 64, inner=28), _kernel("k_b", 64, inner=56)]) == [[0], [1]]
    assert shape_classes([_kernel("k_a", 64, divisor=7), _kernel("k_b", 64, divisor=14)]) == [[0], [1]]
    # an attribute (a tuned optimize choice) before the signature: no plain kernel, never grouped
    odd = '__attribute__((optimize("O2"))) ' + _kernel("k_c", 64)
    assert skeleton(odd) is None and shape_classes([_kernel("k_a", 64), odd]) == [[0], [1]]


def test_kernels_without_loops_stay_apart():
    """A call of a library function (an accelerator kind's kernel) costs gcc nothing: no shared function."""
    calls = [f"TS_EXPORT int32_t k_{n}(const float* restrict p0, float* restrict out) {{\n"
             f"  lib_f32(p0, out, 4, {n});\n  return 0;\n}}" for n in (5, 7)]
    assert skeleton(calls[0]) is None and shape_classes(calls) == [[0], [1]]


def _branches_model(channels: tuple[int, ...]) -> onnx.ModelProto:
    """One input per branch, each Relu(x * 2 + 1) on its own channel count."""
    nodes, inputs, outputs, inits = [], [], [], []
    for k, c in enumerate(channels):
        inputs.append(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [1, c, 6, 6]))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [1, c, 6, 6]))
        scale = np.linspace(0.5, 1.5, c, dtype=np.float32).reshape(1, c, 1, 1)
        inits.append(onnx.numpy_helper.from_array(scale, f"s{k}"))
        nodes += [helper.make_node("Mul", [f"x{k}", f"s{k}"], [f"m{k}"]),
                  helper.make_node("Relu", [f"m{k}"], [f"y{k}"])]
    graph = helper.make_graph(nodes, "branches", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(config: dict[str, object], channels: tuple[int, ...]) -> tuple[dict[str, str], list[np.ndarray]]:
    mod, params = from_onnx(_branches_model(channels))
    with PassContext(config=config):
        lib = tessera.build(mod, target="c", params=params)
    gm = tessera.GraphModule(lib)
    rng = np.random.default_rng(0)
    for k, c in enumerate(channels):
        gm.set_input(f"x{k}", rng.standard_normal((1, c, 6, 6)).astype(np.float32))
    gm.run()
    return lib.c_sources, [gm.get_output(k) for k in range(len(channels))]


def test_a_model_with_repeated_layers_compiles_one_function_and_computes_the_same():
    channels = (24, 40, 56)
    shared_c, shared_out = _run({}, channels)
    apart_c, apart_out = _run({SHAPE_CLASSES_CONFIG: False}, channels)
    shared_text, apart_text = "\n".join(shared_c.values()), "\n".join(apart_c.values())
    assert len(re.findall(rf"^{SHARED_MACRO} int32_t \w+\(", shared_text, re.M)) == 1
    assert SHARED_MACRO not in apart_text
    kernels = sorted(set(re.findall(r"^TS_EXPORT int32_t (tsgen_default_fused\w*)\(", apart_text, re.M)))
    assert len(kernels) == 3
    assert sorted(set(re.findall(r"^TS_EXPORT int32_t (tsgen_default_fused\w*)\(", shared_text, re.M))) == kernels
    rng = np.random.default_rng(0)
    for k, c in enumerate(channels):
        x = rng.standard_normal((1, c, 6, 6)).astype(np.float32)
        expected = np.maximum(x * np.linspace(0.5, 1.5, c, dtype=np.float32).reshape(1, c, 1, 1), 0)
        np.testing.assert_array_equal(shared_out[k], apart_out[k])
        np.testing.assert_allclose(shared_out[k], expected, rtol=1e-6)


def test_generated_c_is_byte_identical_across_builds():
    first, _ = _run({}, (24, 40, 56))
    second, _ = _run({}, (24, 40, 56))
    assert first == second


def test_a_bad_shape_class_setting_is_refused_naming_the_key():
    mod, params = from_onnx(_branches_model((24,)))
    with PassContext(config={SHAPE_CLASSES_CONFIG: "yes"}), pytest.raises(TesseraError, match=SHAPE_CLASSES_CONFIG):
        tessera.build(mod, target="c", params=params)


def test_units_are_balanced_by_length_and_deterministic():
    pieces = [_Piece(k, (), "x" * size, (f"k{k}",)) for k, size in enumerate([90, 10, 50, 40, 30, 30, 20, 10])]
    units = _balanced_units(pieces, 2)
    assert units == _balanced_units(list(reversed(pieces)), 2)  # the input order does not matter
    assert [sum(len(p.text) for p in u) for u in units] == [140, 140]
    assert all([p.first for p in u] == sorted(p.first for p in u) for u in units)  # kernel order inside a unit
    assert [len(u) for u in _balanced_units(pieces, len(pieces))] == [1] * len(pieces)


def test_conflict_lists_match_the_pairwise_test():
    rng = random.Random(3)
    for _ in range(50):
        buffers = []
        for k in range(rng.randrange(0, 40)):
            start = rng.randrange(0, 20)
            buffers.append(BufferInfo(f"b{k}", rng.choice([4, 64, 1000]), start, start + rng.randrange(0, 6)))
        found = conflict_lists(buffers)
        for b in buffers:
            expected = sorted(o.name for o in buffers if o is not b and o.conflicts(b))
            assert sorted(o.name for o in buffers if id(o) in found[id(b)]) == expected
        plan = plan_memory(buffers, 16, hill_climb_iterations=30)
        plan.check()
