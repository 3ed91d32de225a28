"""Semantics against onnxruntime: 0-d tensors, reductions over extent-1 axes,
and what the importer must refuse (issue 14)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import te
from tessera.errors import ConversionError
from tessera.frontend import from_onnx
from tessera.runtime.params_blob import load_params, save_params
from tessera.tir import expr as E
from tessera.tir.printer import primfunc_str

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
               inits: tuple[np.ndarray, ...] | dict[str, np.ndarray] = (), opset: int = 17) -> onnx.ModelProto:
    tensors = [numpy_helper.from_array(v, k) for k, v in dict(inits).items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name: str, elem: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def tessera_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], executor: str = "graph") -> list[np.ndarray]:
    mod, params = from_onnx(model)
    args = [feeds[i.name] for i in model.graph.input if i.name in feeds]
    if executor == "aot":
        return tessera.build(mod, params=params, executor="aot", mod_name="m").run_host(args)
    return tessera.build(mod, params=params)(*args)


def check_against_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], executor: str = "graph") -> None:
    expected = ort_outputs(model, feeds)
    actual = tessera_outputs(model, feeds, executor)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


# ------------------------------------------------- reductions over extent-1 axes
def test_reduction_epilogue_may_read_a_stage_materialised_later():
    """Root cause of "no buffer for stage softmax_exp": a reduction of extent 1 has the shape
    of its reader, so the reader becomes its epilogue; the probe that checks this expanded
    the reader before other materialised stages had buffers."""
    x = te.placeholder((3, 1), "float32", "x")
    staged = te.compute((3, 1), lambda i, j: E.mul(x[i, j], 2.0), name="staged", materialize=True)
    r = te.reduce_axis(1, "r")
    total = te.compute((3, 1), lambda i, j: te.sum(staged[i, r.var], r), name="total")
    out = te.compute((3, 1), lambda i, j: E.div(staged[i, j], total[i, 0]), name="ratio")
    lines = [line.strip() for line in primfunc_str(te.lower("tsgen_test_epilogue", [x], [out])).splitlines()]
    # the sum accumulates into the output, then the epilogue divides the staged buffer by it
    assert lines[-2:] == ["out[i0, 0] = total_acc[0]", "out[i0, 0] = (staged_buf[i0, 0] / out[i0, 0])"]


SIZE_ONE_AXIS = [
    ("Softmax", {"axis": 1}, [3, 1]),
    ("LogSoftmax", {"axis": 1}, [3, 1]),
    ("Softmax", {"axis": 0}, [1, 4]),
    ("LogSoftmax", {"axis": -1}, [2, 3, 1]),
    ("Softmax", {"axis": 0}, [1]),
    ("Hardmax", {"axis": 1}, [3, 1]),
    ("LpNormalization", {"axis": 1, "p": 2}, [3, 1]),
    ("LpNormalization", {"axis": 1, "p": 1}, [3, 1]),
    ("ArgMax", {"axis": 1}, [3, 1]),
    ("ArgMin", {"axis": 1, "keepdims": 0}, [3, 1]),
    ("ReduceMax", {"axes": [1]}, [3, 1]),
    ("ReduceMin", {"axes": [1], "keepdims": 0}, [3, 1]),
    ("ReduceLogSumExp", {"axes": [1]}, [3, 1]),
    ("ReduceL2", {"axes": [1]}, [3, 1]),
    ("ReduceMean", {"axes": [0, 1]}, [1, 1]),
]


@pytest.mark.parametrize("op_type, attrs, shape", SIZE_ONE_AXIS)
def test_reductions_over_an_axis_of_size_one_match_onnxruntime(op_type: str, attrs: dict, shape: list[int]):
    out_type = I64 if op_type.startswith("Arg") else F
    opset = 13 if op_type.startswith("Reduce") else 17  # opset 13 keeps `axes` an attribute
    model = make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)], [vi("x", F, shape)],
                       [vi("y", out_type, None)], opset=opset)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    check_against_ort(model, {"x": x})


def test_topk_with_k_equal_to_an_axis_of_one():
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)], [vi("x", F, [3, 1])],
                       [vi("v", F, None), vi("i", I64, None)], {"k": np.array([1], np.int64)})
    check_against_ort(model, {"x": np.random.default_rng(2).standard_normal((3, 1)).astype(np.float32)})


def test_softmax_over_an_axis_of_size_one_in_the_aot_executor():
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [vi("x", F, [2, 1])], [vi("y", F, None)])
    check_against_ort(model, {"x": np.array([[3.0], [-1.0]], np.float32)}, executor="aot")


def test_flatten_rejects_an_axis_outside_minus_rank_to_rank():
    model = make_model([helper.make_node("Flatten", ["x"], ["y"])], [vi("x", F, [])], [vi("y", F, None)])
    with pytest.raises(ConversionError, match=r"Flatten_0.*axis 1 is out of range for a 0-d input \(valid: 0..0\)"):
        from_onnx(model)


# ------------------------------------------------------------------- 0-d tensors
SCALAR = np.array(-1.5, np.float32)
X34 = np.arange(12, dtype=np.float32).reshape(3, 4)


def _zero_d_models() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    node = helper.make_node
    gather_sum = make_model(
        [node("Gather", ["x", "i"], ["g"]), node("ReduceSum", ["g", "axes"], ["y"], keepdims=0)],
        [vi("x", F, [3, 4])], [vi("y", F, None)], {"i": np.array(1, np.int64), "axes": np.array([0], np.int64)},
        opset=13)
    return {
        # the case: a 0-d index initializer became (1,), the Gather kept the axis, the sum was per column
        "gather_scalar_initializer_then_reduce_sum": (gather_sum, {"x": X34}),
        "scalar_input_plus_scalar_float_initializer": (make_model(
            [node("Add", ["x", "c"], ["y"])], [vi("x", F, [])], [vi("y", F, None)],
            {"c": np.array(2.5, np.float32)}), {"x": SCALAR}),
        "gather_with_scalar_runtime_index": (make_model(
            [node("Gather", ["x", "i"], ["y"], axis=1)], [vi("x", F, [3, 4]), vi("i", I64, [])], [vi("y", F, None)]),
            {"x": X34, "i": np.array(-2, np.int64)}),
        "gather_scalar_index_from_1d_data": (make_model(
            [node("Gather", ["x", "i"], ["y"])], [vi("x", F, [4])], [vi("y", F, None)],
            {"i": np.array(-1, np.int64)}), {"x": X34[1]}),
        "reduce_sum_all_axes_to_scalar": (make_model(
            [node("ReduceSum", ["x"], ["y"], keepdims=0)], [vi("x", F, [3, 4])], [vi("y", F, None)], opset=13),
            {"x": X34}),
        "reduce_max_of_a_scalar": (make_model(
            [node("ReduceMax", ["x"], ["y"], keepdims=0)], [vi("x", F, [])], [vi("y", F, None)], opset=13),
            {"x": SCALAR}),
        "reshape_to_scalar": (make_model(
            [node("Reshape", ["x", "s"], ["y"])], [vi("x", F, [1, 1])], [vi("y", F, None)],
            {"s": np.array([], np.int64)}), {"x": np.full((1, 1), 4.0, np.float32)}),
        "squeeze_then_unsqueeze_scalar": (make_model(
            [node("Squeeze", ["x"], ["s"]), node("Unsqueeze", ["s", "a"], ["y"]), node("Neg", ["s"], ["z"])],
            [vi("x", F, [1])], [vi("y", F, None), vi("z", F, None)], {"a": np.array([0], np.int64)}),
            {"x": np.array([3.0], np.float32)}),
        "dot_of_two_vectors": (make_model(
            [node("MatMul", ["a", "b"], ["y"])], [vi("a", F, [4]), vi("b", F, [4])], [vi("y", F, None)]),
            {"a": X34[1], "b": X34[2]}),
        "argmax_of_a_vector": (make_model(
            [node("ArgMax", ["x"], ["y"], keepdims=0)], [vi("x", F, [4])], [vi("y", I64, None)]),
            {"x": np.array([1, 5, 2, 0], np.float32)}),
        "scalar_constant_node_and_identity_output": (make_model(
            [node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(3.0, np.float32))),
             node("Mul", ["x", "c"], ["y"]), node("Identity", ["x"], ["z"])],
            [vi("x", F, [])], [vi("y", F, None), vi("z", F, None)]), {"x": SCALAR}),
        "where_with_scalar_condition": (make_model(
            [node("Where", ["c", "a", "b"], ["y"])], [vi("c", TensorProto.BOOL, []), vi("a", F, [3]), vi("b", F, [])],
            [vi("y", F, None)]), {"c": np.array(False), "a": X34[0, :3].copy(), "b": SCALAR}),
    }


ZERO_D = _zero_d_models()
ZERO_D_AOT = ["gather_scalar_initializer_then_reduce_sum", "scalar_input_plus_scalar_float_initializer",
              "gather_with_scalar_runtime_index", "squeeze_then_unsqueeze_scalar"]


@pytest.mark.parametrize("case", sorted(ZERO_D))
def test_zero_d_tensors_match_onnxruntime(case: str):
    check_against_ort(*ZERO_D[case])


@pytest.mark.parametrize("case", ZERO_D_AOT)
def test_zero_d_tensors_in_the_aot_executor(case: str):
    check_against_ort(*ZERO_D[case], executor="aot")


def test_zero_d_initializer_stays_zero_d_in_relay_and_params():
    model, _ = ZERO_D["scalar_input_plus_scalar_float_initializer"]
    mod, params = from_onnx(model)
    assert params["c"].shape == () and mod.main.params[1].type_annotation.shape == ()
    model, _ = ZERO_D["gather_scalar_initializer_then_reduce_sum"]
    assert from_onnx(model)[0].main.checked_type.ret_type.shape == ()


def test_params_blob_keeps_zero_d_arrays():
    loaded = load_params(save_params({"s": np.array(2.5, np.float32), "v": np.arange(3, dtype=np.int64)}))
    assert loaded["s"].shape == () and loaded["s"] == 2.5 and loaded["v"].shape == (3,)


def test_exported_library_with_zero_d_input_and_output(tmp_path):
    model, feeds = ZERO_D["scalar_input_plus_scalar_float_initializer"]
    mod, params = from_onnx(model)
    loaded = tessera.load_module(tessera.build(mod, params=params).export_library(tmp_path / "m.so"))
    (y,) = loaded(feeds["x"])
    assert y.shape == () and y == np.float32(1.0)


# ------------------------------------------------- models onnxruntime refuses to load
def _relu_model(outputs: list[str] = ("y",), opset: int = 17) -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])],
                      [vi(o, F, [2]) for o in outputs], opset=opset)


def _assert_ort_refuses(model: onnx.ModelProto) -> None:
    with pytest.raises(Exception):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_importer_rejects_a_graph_output_listed_twice():
    with pytest.raises(ConversionError, match="graph output 'y' is listed twice"):
        from_onnx(_relu_model(["y", "y"]))


@pytest.mark.parametrize("case, message", [
    ("two_nodes", r"'y' is defined twice, by node 'Relu_0' \(Relu\) and by node 'Neg_1' \(Neg\)"),
    ("node_over_input", r"'x' is defined twice, by a graph input and by node 'Relu_0' \(Relu\)"),
    ("node_over_initializer", r"'c' is defined twice, by an initializer and by node 'Relu_0' \(Relu\)"),
    ("input_twice", r"'x' is defined twice, by a graph input and by a graph input"),
])
def test_importer_rejects_a_value_defined_twice(case: str, message: str):
    node = helper.make_node
    x = vi("x", F, [2])
    models = {
        "two_nodes": make_model([node("Relu", ["x"], ["y"]), node("Neg", ["x"], ["y"])], [x], [vi("y", F, [2])]),
        "node_over_input": make_model([node("Relu", ["x"], ["x"])], [x], [vi("x", F, [2])]),
        "node_over_initializer": make_model([node("Relu", ["x"], ["c"]), node("Add", ["c", "x"], ["y"])], [x],
                                            [vi("y", F, [2])], {"c": np.ones(2, np.float32)}),
        "input_twice": make_model([node("Add", ["x", "x"], ["y"])], [x, vi("x", F, [2])], [vi("y", F, [2])]),
    }
    _assert_ort_refuses(models[case])
    with pytest.raises(ConversionError, match=message):
        from_onnx(models[case])


def test_initializer_listed_among_the_inputs_is_one_definition():
    model = make_model([helper.make_node("Add", ["x", "c"], ["y"])], [vi("x", F, [2]), vi("c", F, [2])],
                       [vi("y", F, [2])], {"c": np.full(2, 3.0, np.float32)})
    check_against_ort(model, {"x": np.ones(2, np.float32)})


def test_importer_rejects_an_opset_newer_than_it_knows():
    from tessera.frontend.onnx.registry import HIGHEST_OPSET

    newest = HIGHEST_OPSET[""]
    with pytest.raises(ConversionError, match=rf"opset {newest + 1} of domain 'ai.onnx'; tessera knows that "
                                              rf"domain up to opset {newest}"):
        from_onnx(_relu_model(opset=newest + 1))
    assert from_onnx(_relu_model(opset=newest))[0].main is not None
    model = _relu_model()
    model.opset_import.append(helper.make_opsetid("com.microsoft", 2))
    with pytest.raises(ConversionError, match="opset 2 of domain 'com.microsoft'; tessera knows that domain up to opset 1"):
        from_onnx(model)


def test_every_domain_with_converters_has_a_highest_opset():
    from tessera.frontend.onnx import ops  # noqa: F401  (registers the converters)
    from tessera.frontend.onnx.registry import CONVERTERS, HIGHEST_OPSET

    assert CONVERTERS.domains() == set(HIGHEST_OPSET)
