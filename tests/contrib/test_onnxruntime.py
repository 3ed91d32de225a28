"""The `onnxruntime` target: RelayToRuntime + UpdateConstants, as a fallback."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import CompileError, UnsupportedOperatorError
from tessera.frontend import from_onnx
from tessera.frontend.onnx.backend import claimed_op_types
from tessera.testing.models import ort_run

LACKING = ("Det", "GridSample")  # operators this model needs and tessera does not implement


def _model() -> tuple[onnx.ModelProto, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 3)).astype(np.float32)
    m = rng.uniform(-1, 1, (2, 3, 4, 2)).astype(np.float32)  # a sampling grid
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"]),
        helper.make_node("GridSample", ["a", "m"], ["e"]),
        helper.make_node("Relu", ["e"], ["r"]),
        helper.make_node("Det", ["a"], ["d"]),
        helper.make_node("Mul", ["d", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "fallback",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 1, 3, 4])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(m, "m"),
         onnx.numpy_helper.from_array(np.array([2.0], np.float32), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, rng.standard_normal((2, 1, 3, 3)).astype(np.float32)


def test_the_model_really_needs_operators_tessera_lacks():
    assert not set(LACKING) & claimed_op_types()
    model, _ = _model()
    with pytest.raises(UnsupportedOperatorError, match="GridSample"):
        from_onnx(model)


def test_fallback_model_matches_onnxruntime(tmp_path):
    model, x = _model()
    mod, params = from_onnx(model, opaque_unsupported=True)
    lib = tessera.build(mod, target="onnxruntime", params=params)
    expected = ort_run(model, {"x": x})
    for ours, ref in zip(lib(x), expected):
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
    # the GridSample grid is owned by the external module: exported with it, not as a graph parameter
    owned = {name: v for consts in lib.external_constants.values() for name, v in consts.items()}
    weight = onnx.numpy_helper.to_array(model.graph.initializer[1])
    assert [np.array_equal(v, weight) for v in owned.values()].count(True) == 1
    assert not any(np.array_equal(v, weight) for v in lib.params.values() if v.shape == weight.shape)
    loaded = tessera.load_module(lib.export_library(tmp_path / "fallback.so"))
    for ours, ref in zip(tessera.GraphModule(loaded)(x), expected):
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_opaque_nodes_without_a_capable_target_fail_clearly():
    model, _ = _model()
    mod, params = from_onnx(model, opaque_unsupported=True)
    with pytest.raises(CompileError, match="onnx.opaque has no lowering.*target='onnxruntime'"):
        tessera.build(mod, target="c", params=params)


def test_external_calls_split_the_c_kernels_into_segments():
    import json

    model, x = _model()
    mod, params = from_onnx(model, opaque_unsupported=True)
    lib = tessera.build(mod, target="onnxruntime", params=params)
    graph = json.loads(lib.graph_json)
    kernels = [n for n, node in enumerate(graph["nodes"]) if node["op"] == "kernel"]
    c_kernels = {n for n in kernels if graph["nodes"][n]["func"] in lib.module.function_names}
    segmented = [n for seg in graph["segments"] for n in seg["nodes"]]
    # every C kernel runs in exactly one segment, in order; the onnxruntime calls in none
    assert sorted(segmented) == segmented and set(segmented) == c_kernels and c_kernels != set(kernels)
    for seg in graph["segments"]:  # a segment is a run of consecutive kernel calls
        first, last = kernels.index(seg["nodes"][0]), kernels.index(seg["nodes"][-1])
        assert kernels[first:last + 1] == seg["nodes"]
