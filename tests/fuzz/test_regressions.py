"""Bugs the fuzzer found, each minimised to the graph that showed it.

Each test failed before its fix. Reductions whose `noop_with_empty_axes`
result was wrong are tested next to the other reduction tests
(tests/op/test_reduce.py::test_reduce_noop_with_empty_axes).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tessera.testing.fuzz.check import Kind, reference, run_case
from tessera.testing.fuzz.generate import Case, Tolerance


def graph(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
          initializers: dict[str, np.ndarray] | None = None, opset: int = 18) -> onnx.ModelProto:
    """A model whose output types come from ONNX shape inference (the checker wants them)."""

    def info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)

    g = helper.make_graph(nodes, "regression", [info(k, v) for k, v in inputs.items()], [],
                          initializer=[onnx.numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    known = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info}
    model.graph.output.extend(known[o] for o in outputs)
    return model


def assert_matches_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rel: float = 1e-6,
                               executor: str = "graph") -> None:
    case = Case(model, feeds, {o.name: Tolerance(rel, 1.0) for o in model.graph.output}, executor=executor)
    outcome = run_case(case, reference(case))
    assert outcome.kind is Kind.PASSED, f"{outcome.kind.value}: {outcome.detail}"


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceSum", "ReduceProd", "ReduceL2", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_of_a_0d_tensor(op_type: str, keepdims: int) -> None:
    """A reduction of a 0-d input has no axis to reduce: lowering raised StopIteration."""
    x = np.asarray(2.5, dtype=np.float32)
    model = graph([helper.make_node(op_type, ["x"], ["y"], keepdims=keepdims)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


def test_split_into_an_empty_chunk_then_reshape() -> None:
    """A kernel writing a zero-size tensor divided by its 0 extent in index arithmetic, which gcc
    rejects under -Werror (tests build with TESSERA_WERROR=1)."""
    x = np.asarray([[10, 14]], dtype=np.uint32)
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=1),
             helper.make_node("Reshape", ["a", "shape"], ["y"])]
    model = graph(nodes, {"x": x}, ["y", "b"], {"sizes": np.asarray([0, 1, 1], np.int64),
                                                "shape": np.asarray([1, 0, 2, 1], np.int64)}, opset=13)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_bitwise_not_of_a_cast_comparison(dtype: str) -> None:
    """`~` of a value gcc can see came from a comparison: a -Wbool-operation warning (an error
    under -Werror) in the generated C."""
    x = np.asarray([7, 8, -2, -6], dtype=np.int16)
    y = np.asarray([7, 0, -2, 1], dtype=np.int16)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Equal", ["x", "y"], ["eq"]), helper.make_node("Cast", ["eq"], ["n"], to=to),
             helper.make_node("BitwiseNot", ["n"], ["out"])]
    model = graph(nodes, {"x": x, "y": y}, ["out"])
    assert_matches_onnxruntime(model, {"x": x, "y": y})


@pytest.mark.parametrize("dtype", ["int16", "int32", "float32", "uint8"])
def test_sign_of_a_cast_boolean(dtype: str) -> None:
    """Sign compares with 0 a value gcc can see came from a logical not: a -Wbool-compare warning
    (an error under -Werror) in the generated C."""
    x = np.asarray([[True, False, True]])
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Not", ["x"], ["n"]), helper.make_node("Cast", ["n"], ["c"], to=to),
             helper.make_node("Sign", ["c"], ["out"])]
    model = graph(nodes, {"x": x}, ["out"])
    assert_matches_onnxruntime(model, {"x": x})


def test_aot_outputs_that_are_constants() -> None:
    """Outputs computed at compile time (Shape, a Constant) are copied from the AOT params blob:
    the copy read bytes of the blob as elements (every value after the first was wrong)."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(
                 np.asarray([2.5, -1.0, 7.0], np.float32))),
             helper.make_node("Relu", ["x"], ["r"])]
    model = graph(nodes, {"x": x}, ["shape", "c", "r"])
    assert_matches_onnxruntime(model, {"x": x}, executor="aot")


def test_softmax_of_an_empty_constant() -> None:
    """Constant folding evaluated Softmax of a zero-size weight with NumPy, whose max over the
    empty array raised ValueError (an internal error)."""
    x = np.zeros((0, 5, 4), np.float32)
    nodes = [helper.make_node("Softmax", ["w"], ["s"], axis=0), helper.make_node("Add", ["s", "x"], ["y"])]
    model = graph(nodes, {"x": x}, ["y"], {"w": np.zeros((0, 5, 4), np.float32)})
    assert_matches_onnxruntime(model, {"x": x})


def test_aot_kernels_between_zero_size_tensors() -> None:
    """Zero-size intermediates share a pool offset, so the AOT executor passed one pointer to two
    `restrict` parameters (gcc -Wrestrict, an error under -Werror). They are now folded to empty
    constants: no kernel computes a tensor with no element."""
    x = np.zeros((0, 2), np.float64)
    idx = np.zeros((0, 3), np.int32)
    cond = np.ones((1, 1, 1), bool)
    nodes = [helper.make_node("GatherElements", ["x", "idx"], ["g"], axis=1),
             helper.make_node("LpNormalization", ["g"], ["n"], axis=-2, p=1),
             helper.make_node("Where", ["cond", "n", "c"], ["y"])]
    model = graph(nodes, {"x": x, "idx": idx, "cond": cond}, ["y", "n"], {"c": np.zeros((2, 0, 3), np.float64)})
    assert_matches_onnxruntime(model, {"x": x, "idx": idx, "cond": cond}, executor="aot")


def test_aot_output_that_is_a_graph_input() -> None:
    """A graph that returns its input unchanged: the AOT executor declared `in1` twice."""
    x = np.asarray(-3, dtype=np.int32)
    y = np.asarray([1.5, -1.5], dtype=np.float32)
    model = graph([helper.make_node("Relu", ["y"], ["r"])], {"in1": x, "y": y}, ["r"])
    model.graph.output.append(helper.make_tensor_value_info("in1", onnx.TensorProto.INT32, []))
    assert_matches_onnxruntime(model, {"in1": x, "y": y}, executor="aot")


# the fuzzer's data: with && / ||, gcc 12 at -O3 -march=x86-64-v3 got elements 35 and 55 wrong
OR_X = [-8, -2, 3, -1, 1, 7, 2, 7, 0, 5, 5, -3, 0, 7, 1, 3, 6, -3, 0, -8, -4, -7, 5, 3, -4, -6, 7, -2, 6, -7, 5, 4,
        -2, 4, -6, -8, 4, 5, 5, -1, 5, 7, 5, 2, -4, 2, 6, 1, -5, 6, 3, -3, 2, -5, 4, -8, -3, -7, -8, 2, -3, 3, 6, -6,
        -1, -7, -7, 6, -7, -7, -8, -3, -6, -4, -1, 4, -1, 6, -6, -3]
OR_MASK = [1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0,
           1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 1,
           1, 1, 1, 1, 0, 1, 0, 0]


@pytest.mark.parametrize("op_type", ["Or", "And"])
def test_logic_of_a_bool_and_an_int64_comparison(op_type: str) -> None:
    """`mask || (-7 <= x)` in a 3-deep loop nest: gcc 12's loop vectorizer (AVX2) miscompiled the
    short-circuit; And/Or are now bitwise on 0/1 values."""
    x = np.asarray(OR_X, np.int64).reshape(1, 4, 5, 4)
    nodes = [helper.make_node("LessOrEqual", ["c", "x"], ["le"]), helper.make_node(op_type, ["mask", "le"], ["y"])]
    model = graph(nodes, {"x": x}, ["y"], {"c": np.full((1, 1, 1, 1), -7, np.int64),
                                           "mask": np.asarray(OR_MASK, bool).reshape(1, 4, 5, 4)})
    assert_matches_onnxruntime(model, {"x": x})


def test_reduce_log_sum_exp_without_axes_of_a_large_negative_value() -> None:
    """noop_with_empty_axes: log(exp(x)) is x (onnxruntime's answer); computed as written it
    underflowed to -inf for x = -240 in float32."""
    x = np.asarray([[-240.5, 3.0]], np.float32)
    nodes = [helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], noop_with_empty_axes=1)]
    model = graph(nodes, {"x": x}, ["y"], {"axes": np.zeros(0, np.int64)})
    assert_matches_onnxruntime(model, {"x": x})
