"""Reductions, arg-reductions and top-k: compiled kernels against the ops'
NumPy references, and the ONNX Reduce* converters against onnx's reference
implementation across the attribute and input forms of `axes`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera import relay
from tessera.errors import ConversionError, TypeInferenceError
from tessera.frontend.onnx.backend import TesseraBackend
from tessera.op import reduce as red
from tessera.relay.expr import Call, TupleGetItem
from tessera.testing.isa import require_level
from tessera.transform.infer_type import infer_expr

RNG = np.random.default_rng(1)


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def compile_and_check(build: Callable[..., relay.Expr], x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Compile build(var) (a call, or a tuple-valued call) and compare with the op's reference."""
    var = relay.Var("x", relay.TensorType(x.shape, x.dtype.name))
    call = build(var)
    assert isinstance(call, Call)
    ref = call.op.reference([x], call.attrs)
    refs = ref if isinstance(ref, tuple) else (ref,)
    body = relay.Tuple(tuple(TupleGetItem(call, k) for k in range(len(refs)))) if isinstance(ref, tuple) else call
    outs = tessera.build(relay.IRModule.from_expr(relay.Function((var,), body)))(x)
    for out, expected in zip(outs, refs):
        assert out.dtype == expected.dtype and out.shape == expected.shape
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    return refs


# ------------------------------------------------------------- Relay ops
@pytest.mark.parametrize("op", [red.sum, red.mean, red.max, red.min, red.prod])
@pytest.mark.parametrize("axes,keepdims", [((1,), False), ((0, 2), True), ((), False)])
def test_reductions(op, axes: tuple, keepdims: bool) -> None:
    compile_and_check(lambda v: op(v, axes=axes, keepdims=keepdims), randn(3, 4, 5))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integer_reductions(dtype: str) -> None:
    x = RNG.integers(0, 9, size=(4, 6)).astype(dtype)
    for op in (red.sum, red.max, red.min):
        compile_and_check(lambda v, op=op: op(v, axes=(1,), keepdims=False), x)


def test_bool_max_min() -> None:
    x = np.array([[True, False], [False, False], [True, True]])
    (mx,) = compile_and_check(lambda v: red.max(v, axes=(1,), keepdims=True), x)
    (mn,) = compile_and_check(lambda v: red.min(v, axes=(1,), keepdims=True), x)
    np.testing.assert_array_equal(mx[:, 0], [True, False, True])
    np.testing.assert_array_equal(mn[:, 0], [False, False, True])


@pytest.mark.parametrize("op", [red.argmax, red.argmin])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("axis,keepdims", [(1, True), (-1, False), (0, False)])
def test_arg_reductions(op, last: bool, axis: int, keepdims: bool) -> None:
    x = RNG.integers(0, 3, size=(3, 4, 5)).astype("float32")  # many ties
    compile_and_check(lambda v: op(v, axis=axis, keepdims=keepdims, select_last_index=last), x)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis,k", [(1, 3), (0, 2), (-1, 5)])
def test_topk(largest: bool, axis: int, k: int) -> None:
    x = RNG.integers(0, 4, size=(3, 4, 5)).astype("int64")  # ties: lower index first
    values, indices = compile_and_check(lambda v: red.topk(v, k=k, axis=axis, largest=largest), x)
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    np.testing.assert_array_equal(indices, np.take(order, np.arange(k), axis=axis))
    np.testing.assert_array_equal(values, np.take_along_axis(x, indices, axis=axis))


def test_topk_rejects_large_k() -> None:
    x = relay.Var("x", relay.TensorType((2, 3), "float32"))
    with pytest.raises(TypeInferenceError, match="k=4 must be in 1..3"):
        infer_expr(red.topk(x, k=4, axis=1))


def test_argmax_rejects_bad_axis() -> None:
    x = relay.Var("x", relay.TensorType((2, 3), "float32"))
    with pytest.raises(TypeInferenceError, match="axis 2 out of range"):
        infer_expr(red.argmax(x, axis=2))


# ------------------------------------------------------- ONNX converters
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def reduce_model(op_type: str, x: np.ndarray, axes: list[int] | None, opset: int, as_input: bool,
                 **attrs: object) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    names = ["x"]
    inits = []
    if axes is not None and as_input:
        inits.append(onnx.numpy_helper.from_array(np.asarray(axes, dtype=np.int64), "axes"))
        names.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_reduce(op_type: str, x: np.ndarray, axes: list[int] | None, opset: int, as_input: bool,
                 **attrs: object) -> None:
    model = reduce_model(op_type, x, axes, opset, as_input, **attrs)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (actual,) = TesseraBackend.prepare(model).run([x])
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([-1, 0], 0), (None, 1)])
def test_reduce_axes_attribute(op_type: str, axes: list[int] | None, keepdims: int) -> None:
    x = np.abs(randn(3, 4, 2)) + 0.1  # positive: ReduceLogSum is defined
    check_reduce(op_type, x, axes, 11, as_input=False, keepdims=keepdims)


@pytest.mark.parametrize("op_type", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [([2, 0], 0), ([], 1)])
def test_reduce_axes_input(op_type: str, axes: list[int], keepdims: int) -> None:
    x = np.abs(randn(3, 4, 2)) + 0.1
    check_reduce(op_type, x, axes, 18, as_input=True, keepdims=keepdims)


@pytest.mark.parametrize("op_type", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op_type: str) -> None:
    """No axes with noop_with_empty_axes: nothing is reduced, but the elementwise part stays
    (ReduceSumSquare gives x * x, ReduceLogSum log x), as the ONNX reference and onnxruntime
    compute it (found by the fuzzer: the importer returned x)."""
    x = np.abs(randn(3, 4)) + 0.1
    check_reduce(op_type, x, [], 18, as_input=True, noop_with_empty_axes=1)


@pytest.mark.parametrize("op_type,value", [("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf),
                                           ("ReduceMin", np.inf), ("ReduceLogSumExp", -np.inf),
                                           ("ReduceL2", 0.0)])
def test_reduce_empty_axis(op_type: str, value: float) -> None:
    x = np.zeros((2, 0, 3), dtype=np.float32)
    (actual,) = TesseraBackend.prepare(reduce_model(op_type, x, [1], 18, as_input=True)).run([x])
    np.testing.assert_array_equal(actual, np.full((2, 1, 3), value, dtype=np.float32))


def test_reduce_log_sum_exp_large_values() -> None:
    """The max is subtracted first, so exp does not overflow float32."""
    x = np.array([[1000.0, 1000.0], [-1000.0, 0.0]], dtype=np.float32)
    (actual,) = TesseraBackend.prepare(reduce_model("ReduceLogSumExp", x, [1], 18, True, keepdims=0)).run([x])
    np.testing.assert_allclose(actual, [1000.0 + np.log(2.0), 0.0], rtol=1e-6)


def test_reduce_rejects_bad_axis() -> None:
    x = randn(2, 3)
    with pytest.raises(ConversionError, match="axis 2 is out of range"):
        TesseraBackend.prepare(reduce_model("ReduceSum", x, [2], 11, as_input=False)).run([x])


def test_topk_onnx_needs_constant_k() -> None:
    """k fed as a graph input is bound at run time (the output shape depends on it)."""
    x = randn(3, 5)
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
         helper.make_tensor_value_info("k", TensorProto.INT64, (1,))],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("v", "i")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    k = np.array([2], dtype=np.int64)
    expected = ReferenceEvaluator(model).run(None, {"x": x, "k": k})
    actual = TesseraBackend.prepare(model).run([x, k])
    for e, a in zip(expected, actual):
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("n", [32, 47, 100])
def test_a_sum_along_the_last_axis_keeps_vector_partial_sums_on_a_host(n):
    """Partial sums, lane by lane (te.compute's `partial_sums`), then the rest of the row: the same sum to
    rounding, for rows of whole vectors and rows with a rest."""
    x = np.random.default_rng(n).standard_normal((3, 5, n)).astype(np.float32)
    var = relay.Var("x", relay.TensorType(x.shape, "float32"))
    mod = relay.IRModule.from_expr(relay.Function((var,), red.mean(var, axes=(2,))))
    lib = tessera.build(mod, target="c -mcpu=x86-64-v3")
    assert "mean_sum_lanes[16]" in "".join(lib.c_sources.values())
    require_level("x86-64-v3")
    np.testing.assert_allclose(lib(x)[0], x.astype(np.float64).mean(axis=2), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("target", "axes"), [("c -mcpu=x86-64-v3", (1,)), ("c -mcpu=cortex-m4", (2,))])
def test_other_sums_keep_one_accumulator(target, axes):
    """A sum along an axis that is not the last (its elements are not contiguous), or for a core without
    float vectors, keeps its one accumulator (and Cortex-M its C)."""
    var = relay.Var("x", relay.TensorType((3, 40, 40), "float32"))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((var,), red.sum(var, axes=axes))), target=target,
                        executor="aot")
    kernels = "".join(f.text for f in lib.sources())
    assert "sum_acc" in kernels and "_lanes[" not in kernels


@pytest.mark.parametrize(("shape", "axes", "keepdims"), [
    ((1, 8, 14, 14), (2, 3), False),  # a global average pool: rows of 14, one row of 196 in memory
    ((2, 3, 5, 7, 9), (2, 3, 4), True),
    ((2, 3, 40, 5), (1, 3), False),  # not trailing: axes of their own, the last one in partial sums
])
def test_trailing_axes_are_summed_as_one_row(shape, axes, keepdims):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    var = relay.Var("x", relay.TensorType(shape, "float32"))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((var,), red.mean(var, axes=axes, keepdims=keepdims))),
                        target="c -mcpu=x86-64-v3")
    source = "".join(lib.c_sources.values())
    assert ("mean_sum_lanes[16]" in source) == (axes != (1, 3))  # (the last axis of 5 is too short for lanes)
    require_level("x86-64-v3")
    np.testing.assert_allclose(lib(x)[0], x.astype(np.float64).mean(axis=axes, keepdims=keepdims), rtol=1e-5,
                               atol=1e-6)
