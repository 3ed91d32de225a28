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
