"""float16 and bfloat16 as storage types: conversions bit-exact with NumPy and
ml_dtypes, float32 compute rounded per operator, weights stored at half size."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import tessera
from tessera.frontend import from_onnx
from tessera.runtime.params_blob import save_params
from tessera.testing.models import ort_run

RNG = np.random.default_rng(11)
ONNX_TYPE = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT,
             "float64": TensorProto.DOUBLE, "int32": TensorProto.INT32}
NUMPY_TYPE = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def cast_model(src: str, dst: str, n: int) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=ONNX_TYPE[dst])], "cast",
                              [helper.make_tensor_value_info("x", ONNX_TYPE[src], [n])],
                              [helper.make_tensor_value_info("y", ONNX_TYPE[dst], [n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def run_cast(x: np.ndarray, dst: str) -> np.ndarray:
    mod, params = from_onnx(cast_model(x.dtype.name, dst, x.size))
    return tessera.build(mod, params=params)(x)[0]


def every_pattern(dtype: str) -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(NUMPY_TYPE[dtype])


def hard_floats(dtype: str) -> np.ndarray:
    """float32 values that test rounding to `dtype`: every value of it, the midpoints between
    neighbours (ties), just off the midpoints, subnormals, overflow, and random bit patterns."""
    exact = every_pattern(dtype).astype(np.float32)
    finite = np.unique(exact[np.isfinite(exact)])
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2  # exact in float32 (one more bit than dtype)
    mids = mids.astype(np.float32)
    off = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    random = RNG.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 1e-8, 5.96e-8, 2.98e-8,
                      3.4e38, 1e-40, -1e-45], np.float32)
    return np.concatenate([exact, mids, off, random, edges])


def assert_same_bits(ours: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit for bit, except that any NaN matches any NaN."""
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(ours.astype(np.float32)), nan)
    bits = ours.view(np.uint16) if ours.itemsize == 2 else ours.view(np.uint32)
    want = expected.view(np.uint16) if expected.itemsize == 2 else expected.view(np.uint32)
    mismatch = np.flatnonzero((bits != want) & ~nan)
    assert mismatch.size == 0, f"{mismatch.size} values differ, e.g. {ours[mismatch[:5]]} vs {expected[mismatch[:5]]}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrowing_float32_rounds_to_nearest_even(dtype: str) -> None:
    x = hard_floats(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(NUMPY_TYPE[dtype])
    assert_same_bits(run_cast(x, dtype), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_widening_is_exact_for_every_bit_pattern(dtype: str) -> None:
    x = every_pattern(dtype)
    assert_same_bits(run_cast(x, "float32"), x.astype(np.float32))


def test_float64_to_float16_rounds_once() -> None:
    # just above a float16 tie, by less than float32 resolves: rounding through float32 would land on
    # the tie and round to even, the wrong way
    ties = (np.float64(1) + np.arange(1, 200, 2) * 2.0 ** -11)
    x = np.concatenate([ties + 2.0 ** -40, ties - 2.0 ** -40, RNG.standard_normal(10_000) * 100])
    assert_same_bits(run_cast(x, "float16"), x.astype(np.float16))
    assert (x[:99].astype(np.float32).astype(np.float16) != x[:99].astype(np.float16)).any()  # (the trap is real)


def test_float16_to_bfloat16_and_int() -> None:
    x = np.array([1.5, -2.75, 1000.5, 0.1, 65504, -65504, np.inf], np.float16)
    assert_same_bits(run_cast(x, "bfloat16"), x.astype(np.float32).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(run_cast(x[:6], "int32"), x[:6].astype(np.int32))


def _binary_model(op: str, dtype: str, n: int) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "binary",
                              [helper.make_tensor_value_info(k, ONNX_TYPE[dtype], [n]) for k in "ab"],
                              [helper.make_tensor_value_info("y", ONNX_TYPE[dtype], [n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["Add", "Mul", "Div"])
def test_elementwise_results_are_float32_results_rounded(dtype: str, op: str) -> None:
    a, b = (RNG.standard_normal(1000).astype(NUMPY_TYPE[dtype]) for _ in range(2))
    mod, params = from_onnx(_binary_model(op, dtype, 1000))
    ours = tessera.build(mod, params=params)(a, b)[0]
    fn = {"Add": np.add, "Mul": np.multiply, "Div": np.divide}[op]
    assert_same_bits(ours, fn(a.astype(np.float32), b.astype(np.float32)).astype(NUMPY_TYPE[dtype]))


def test_each_operator_rounds_its_result_to_its_type() -> None:
    # (a + b) - a in float16 loses b's low bits in the sum, as ONNX's float16 tensors between the two
    # operators do; a float32 pipeline would keep them (onnxruntime does, lacking float16 Add and Sub
    # kernels on CPU: it casts around the pair and drops the casts between)
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Sub", ["s", "a"], ["y"])],
                              "chain", [helper.make_tensor_value_info(k, TensorProto.FLOAT16, [3]) for k in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    a, b = np.array([1000, 2048, 1], np.float16), np.array([0.123, 0.6, 0.001], np.float16)
    mod, params = from_onnx(model)
    ours = tessera.build(mod, params=params)(a, b)[0]
    assert_same_bits(ours, (a + b) - a)
    assert_same_bits(ours, np.array([0, 0, 2.0 ** -10], np.float16))


def _cnn() -> onnx.ModelProto:
    def w(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (RNG.standard_normal(shape) * scale).astype(np.float32)

    inits = [nh.from_array(w(8, 3, 3, 3), "w1"), nh.from_array(w(8), "b1"), nh.from_array(1 + w(8, scale=0.1), "gamma"),
             nh.from_array(w(8), "beta"), nh.from_array(w(8), "mean"), nh.from_array(1 + np.abs(w(8)), "var"),
             nh.from_array(w(8, 8, 3, 3), "w2"), nh.from_array(w(10, 8), "wf"), nh.from_array(w(10), "bf")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Sigmoid", ["c2"], ["s2"]), helper.make_node("Mul", ["c2", "s2"], ["swish"]),
             helper.make_node("GlobalAveragePool", ["swish"], ["pooled"]), helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_converted_to_float16_runs_and_halves_its_weights(tmp_path) -> None:
    from onnxconverter_common import float16

    model32 = _cnn()
    model16 = float16.convert_float_to_float16(model32)
    assert model16.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float16)
    mod, params = from_onnx(model16)
    lib = tessera.build(mod, params=params)
    (ours,) = lib(x)
    (expected,) = ort_run(model16, {"x": x})
    assert ours.dtype == np.float16
    np.testing.assert_allclose(ours.astype(np.float32), expected.astype(np.float32), rtol=2e-3, atol=2e-3)

    weights32 = sum(nh.to_array(t).nbytes for t in model32.graph.initializer)
    assert all(v.dtype == np.float16 for v in lib.params.values())  # kept narrow: widened by the kernels
    assert sum(v.nbytes for v in lib.params.values()) * 2 == weights32
    mod32, params32 = from_onnx(model32)
    assert len(save_params(lib.params)) < 0.6 * len(save_params(params32))

    loaded = tessera.load_module(lib.export_library(tmp_path / "cnn16.so"))
    np.testing.assert_array_equal(tessera.GraphModule(loaded)(x)[0], ours)


def test_bfloat16_weights_and_outputs() -> None:
    w = RNG.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])], [nh.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = from_onnx(model)
    assert [v.dtype.name for v in params.values()] == ["bfloat16"]
    x = RNG.standard_normal((2, 4)).astype(ml_dtypes.bfloat16)
    (ours,) = tessera.build(mod, params=params)(x)
    assert_same_bits(ours, (x.astype(np.float32) @ w.astype(np.float32)).astype(ml_dtypes.bfloat16))


def test_cli_checks_a_float16_model_with_both_executors(tmp_path, capsys) -> None:
    from onnxconverter_common import float16

    from tessera.cli import main

    path = tmp_path / "cnn16.onnx"
    onnx.save(float16.convert_float_to_float16(_cnn()), path)
    assert main(["run", str(path), "--check", "-q"]) == 0
    assert main(["run", str(path), "--executor", "aot", "--check", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.count("CHECK OK") == 2 and "float16" in out


@pytest.mark.parametrize("verify", [True, False])
def test_arithmetic_on_float16_bits_is_refused_not_miscompiled(verify: bool) -> None:
    from tessera import relay
    from tessera.errors import TesseraError
    from tessera.op import elemwise as ew
    from tessera.transform.pass_infra import PassContext

    a, b = (relay.Var(k, relay.TensorType((4,), "float16")) for k in "ab")
    mod = relay.IRModule.from_expr(relay.Function((a, b), ew.add(a, b)))
    with PassContext(config={"verify": verify}), pytest.raises(TesseraError, match="only holds values"):
        tessera.build(mod)


def test_layer_norm_statistics_keep_their_stash_type() -> None:
    x = RNG.standard_normal((2, 8)).astype(np.float16)
    scale, bias = np.ones(8, np.float16), np.zeros(8, np.float16)
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv_std"], axis=-1)
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 8]),
                               helper.make_tensor_value_info("mean", TensorProto.FLOAT, [2, 1]),
                               helper.make_tensor_value_info("inv_std", TensorProto.FLOAT, [2, 1])],
                              [nh.from_array(scale, "scale"), nh.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = from_onnx(model)
    ours = tessera.build(mod, params=params)(x)
    expected = ort_run(model, {"x": x})
    assert [o.dtype.name for o in ours] == ["float16", "float32", "float32"] == [e.dtype.name for e in expected]
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=2e-3, atol=2e-3)
