"""Elementwise operators: compiled kernels against their NumPy references and
against the values ONNX and NumPy define, including the cases C leaves
undefined (integer division by -1, big shifts, float -> int overflow); integer
division by zero is an error (tests/unit/test_semantics_checks.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import relay
from tessera.errors import ConversionError, KernelFailure, TesseraError, TypeInferenceError
from tessera.frontend.onnx import from_onnx
from tessera.op import elemwise as ew
from tessera.relay.expr import Call
from tessera.transform.infer_type import infer_expr

RNG = np.random.default_rng(0)


def compile_and_run(build: Callable[..., relay.Expr], *arrays: np.ndarray) -> np.ndarray:
    """Compile build(*vars); when the body is one call, check it against the op's reference."""
    params = [relay.Var(f"a{k}", relay.TensorType(a.shape, a.dtype.name)) for k, a in enumerate(arrays)]
    body = build(*params)
    out = tessera.build(relay.IRModule.from_expr(relay.Function(tuple(params), body)))(*arrays)[0]
    if isinstance(body, Call) and all(a in params for a in body.args):
        ty = infer_expr(body).checked_type
        ref = body.op.reference([arrays[params.index(a)] for a in body.args], body.attrs)
        assert out.dtype == ref.dtype == np.dtype(ty.dtype) and out.shape == ref.shape == ty.shape
        if out.dtype.kind == "f":  # libm, FMA contraction and NumPy round differently
            np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-7, equal_nan=True)
        else:
            np.testing.assert_array_equal(out, ref)
    return out


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def ints(lo: int, hi: int, *shape: int, dtype: str) -> np.ndarray:
    return RNG.integers(lo, hi, shape, endpoint=True).astype(dtype)


def onnx_run(node: onnx.NodeProto, inputs: dict[str, np.ndarray], out_dtype: int, opset: int = 18) -> np.ndarray:
    """Import a one-node ONNX model and run it."""
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    out = helper.make_tensor_value_info(node.output[0], out_dtype, None)
    graph = helper.make_graph([node], "g", vis, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    mod, params = from_onnx(model, shape={n: a.shape for n, a in inputs.items()})
    return tessera.build(mod, params=params)(*inputs.values())[0]


# ----------------------------------------------------------------- unary math
UNARY_FLOAT = {
    "exp": ew.exp, "log": ew.log, "sqrt": ew.sqrt, "erf": ew.erf, "tanh": ew.tanh, "sin": ew.sin,
    "cos": ew.cos, "tan": ew.tan, "asin": ew.asin, "acos": ew.acos, "atan": ew.atan, "sinh": ew.sinh,
    "cosh": ew.cosh, "asinh": ew.asinh, "acosh": ew.acosh, "atanh": ew.atanh, "floor": ew.floor,
    "ceil": ew.ceil, "round": ew.round, "sigmoid": ew.sigmoid, "reciprocal": ew.reciprocal,
    "negative": ew.negative, "abs": ew.abs, "sign": ew.sign, "softplus": ew.softplus,
    "softsign": ew.softsign, "mish": ew.mish, "hard_swish": ew.hard_swish, "relu": ew.relu,
}
DOMAIN = {"log": (0.1, 5), "sqrt": (0, 5), "asin": (-1, 1), "acos": (-1, 1), "atanh": (-0.99, 0.99),
          "acosh": (1, 5)}


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_float_matches_reference(name: str, dtype: str) -> None:
    lo, hi = DOMAIN.get(name, (-4, 4))
    x = RNG.uniform(lo, hi, (3, 4, 5)).astype(dtype)
    compile_and_run(UNARY_FLOAT[name], x)


def test_round_is_half_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.3, -2.7], np.float32)
    np.testing.assert_array_equal(compile_and_run(ew.round, x), [0, 2, 2, -0.0, -2, -2, 2, -3])


def test_sign_and_relu_keep_nan() -> None:
    x = np.array([np.nan, -2.0, 0.0, 3.0], np.float32)
    np.testing.assert_array_equal(compile_and_run(ew.sign, x), [np.nan, -1, 0, 1])
    np.testing.assert_array_equal(compile_and_run(ew.relu, x), [np.nan, 0, 0, 3])


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
def test_integer_unary(dtype: str) -> None:
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -3 if info.min else 3, 0, 5, info.max], dtype)
    compile_and_run(ew.abs, x)
    compile_and_run(ew.sign, x)
    compile_and_run(ew.bitwise_not, x)
    if info.min:
        np.testing.assert_array_equal(compile_and_run(ew.negative, x), np.negative(x))  # INT_MIN wraps


def test_isinf_directions() -> None:
    x = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(compile_and_run(ew.isinf, x), [True, True, False, False])
    np.testing.assert_array_equal(compile_and_run(lambda a: ew.isinf(a, detect_negative=False), x),
                                  [True, False, False, False])
    np.testing.assert_array_equal(compile_and_run(lambda a: ew.isinf(a, detect_positive=False), x),
                                  [False, True, False, False])
    np.testing.assert_array_equal(compile_and_run(ew.isnan, x), [False, False, True, False])


# --------------------------------------------------------------- arithmetic
ARITH = {"add": ew.add, "subtract": ew.subtract, "multiply": ew.multiply, "divide": ew.divide,
         "floor_mod": ew.floor_mod, "trunc_mod": ew.trunc_mod, "maximum": ew.maximum,
         "minimum": ew.minimum}
DIVISIONS = {"divide", "floor_mod", "trunc_mod"}


@pytest.mark.parametrize("name", sorted(ARITH))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint64"])
def test_binary_arithmetic_broadcasts(name: str, dtype: str) -> None:
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        a = ints(max(info.min, -100), min(info.max, 100), 3, 4, 5, dtype=dtype)
        b = ints(max(info.min, -9), 9, 4, 1, dtype=dtype)  # includes -1 divisors
        if name in DIVISIONS:
            b[b == 0] = 7  # a 0 divisor is an error, tested on its own
    else:
        a, b = randn(3, 4, 5, dtype=dtype), randn(4, 1, dtype=dtype)
    compile_and_run(ARITH[name], a, b)


def test_integer_division_never_traps() -> None:
    a = np.array([7, -7, 7, -7, -128, 5], np.int8)
    b = np.array([2, 2, -2, -2, -1, 1], np.int8)
    np.testing.assert_array_equal(compile_and_run(ew.divide, a, b), [3, -3, -3, 3, -128, 5])
    np.testing.assert_array_equal(compile_and_run(ew.floor_mod, a, b), [1, 1, -1, -1, 0, 0])
    np.testing.assert_array_equal(compile_and_run(ew.trunc_mod, a, b), [1, -1, 1, -1, 0, 0])
    for op in (ew.divide, ew.floor_mod, ew.trunc_mod):  # by 0: an error, not a trap or a silent 0
        with pytest.raises(KernelFailure, match="integer division by zero"):
            compile_and_run(op, a, np.where(b == 1, 0, b).astype(np.int8))


def test_float_floor_mod_special_values() -> None:
    a = np.array([-3.0, 3.0, -1.0, 1.0, np.inf, 5.0, np.nan], np.float32)
    b = np.array([np.inf, np.inf, -np.inf, -np.inf, 2.0, 0.0, 2.0], np.float32)
    np.testing.assert_array_equal(compile_and_run(ew.floor_mod, a, b),
                                  [np.inf, 3.0, -1.0, -np.inf, np.nan, np.nan, np.nan])


def test_narrow_integers_wrap_inside_fused_kernels() -> None:
    """uint8 200 + 100 is 44 even when the sum feeds a cast in the same kernel."""
    a, b = np.array([200, 255, 7], np.uint8), np.array([100, 1, 7], np.uint8)
    out = compile_and_run(lambda x, y: ew.cast(ew.add(x, y), dtype="float32"), a, b)
    np.testing.assert_array_equal(out, [44.0, 0.0, 14.0])
    out = compile_and_run(lambda x, y: ew.divide(ew.multiply(x, y), y), a, b)
    np.testing.assert_array_equal(out, (a * b) // b)


def test_maximum_minimum_propagate_nan() -> None:
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(compile_and_run(ew.maximum, a, b), [np.nan, np.nan, 2.0])
    np.testing.assert_array_equal(compile_and_run(ew.minimum, a, b), [np.nan, np.nan, 1.0])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint16", "uint64"])
def test_shifts_follow_onnx_bitshift_28(dtype: str) -> None:
    bits = np.iinfo(dtype).bits
    signed = np.iinfo(dtype).min < 0
    a = np.array([1, 3, 5, 100, 7, 9] + ([-8, -8] if signed else [8, 8]), dtype)
    b = np.array([0, 1, bits - 1, bits, bits + 3, 2] + ([-1, 2] if signed else [2, 1]), dtype)
    left, right = compile_and_run(ew.left_shift, a, b), compile_and_run(ew.right_shift, a, b)
    assert left[3] == left[4] == 0 and right[3] == right[4] == 0  # amount >= width
    if signed:
        assert left[6] == 0 and right[6] == -1  # negative amount: the sign fill
        assert right[7] == -2  # arithmetic shift


def test_comparisons_and_logic() -> None:
    a, b = ints(-3, 3, 2, 5, dtype="int32"), ints(-3, 3, 5, dtype="int32")
    for op in (ew.equal, ew.not_equal, ew.less, ew.less_equal, ew.greater, ew.greater_equal):
        compile_and_run(op, a, b)
    p, q = RNG.random((2, 3)) > 0.5, RNG.random((3,)) > 0.5
    for op in (ew.logical_and, ew.logical_or, ew.logical_xor):
        compile_and_run(op, p, q)
    compile_and_run(ew.logical_not, p)
    compile_and_run(ew.where, p, randn(2, 3), randn(1, 3))


# --------------------------------------------------------------------- power
@pytest.mark.parametrize("base,exponent", [
    ("float32", "float32"), ("float32", "int64"), ("float64", "uint32"),
    ("int64", "float32"), ("int32", "int32"), ("int64", "int64"),
])
def test_power_with_mixed_dtypes(base: str, exponent: str) -> None:
    a = np.array([1, 2, 3, -2, 0, 5], base)
    b = np.array([4, 5, 6, 3, 2, 0], exponent)
    out = compile_and_run(ew.power, a, b)
    assert out.dtype == np.dtype(base)
    np.testing.assert_allclose(out, np.power(a.astype("float64"), b.astype("float64")).astype(base))


def test_integer_power_with_negative_exponents() -> None:
    a = np.array([1, -1, -1, 2, 0, 7], np.int32)
    b = np.array([-3, -3, -2, -1, 3, 2], np.int32)
    np.testing.assert_array_equal(compile_and_run(ew.power, a, b), [1, -1, 1, 0, 0, 49])


# --------------------------------------------------------------------- casts
def test_float_to_int_casts_saturate() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 300.7, -300.7, 1e10, -1.9, 127.9], np.float32)
    np.testing.assert_array_equal(compile_and_run(lambda a: ew.cast(a, dtype="int8"), x),
                                  [0, 127, -128, 127, -128, 127, -1, 127])
    np.testing.assert_array_equal(compile_and_run(lambda a: ew.cast(a, dtype="uint8"), x),
                                  [0, 255, 0, 255, 0, 255, 0, 127])
    big = np.array([9.3e18, -9.3e18, 2.0 ** 62], np.float64)
    np.testing.assert_array_equal(compile_and_run(lambda a: ew.cast(a, dtype="int64"), big),
                                  [2 ** 63 - 1, -(2 ** 63), 2 ** 62])


@pytest.mark.parametrize("src", ["float32", "float64", "int8", "int64", "uint16", "bool"])
@pytest.mark.parametrize("dst", ["float32", "float64", "int8", "int32", "uint8", "uint64", "bool"])
def test_cast_between_supported_dtypes(src: str, dst: str) -> None:
    x = (RNG.standard_normal(12) * 40).astype(src) if src != "bool" else RNG.random(12) > 0.5
    compile_and_run(lambda a: ew.cast(a, dtype=dst), x)


# ---------------------------------------------------------------- activations
ACTIVATIONS = [
    lambda a: ew.leaky_relu(a, alpha=0.1),
    lambda a: ew.thresholded_relu(a, alpha=0.5),
    lambda a: ew.elu(a, alpha=2.0),
    lambda a: ew.selu(a),
    lambda a: ew.celu(a, alpha=2.0),
    lambda a: ew.hard_sigmoid(a, alpha=0.5, beta=0.6),
    lambda a: ew.gelu(a),
    lambda a: ew.gelu(a, approximate="tanh"),
    lambda a: ew.shrink(a, lambd=0.5, bias=0.25),
    lambda a: ew.clip(a, a_min=-0.5, a_max=0.7),
]


@pytest.mark.parametrize("k", range(len(ACTIVATIONS)))
def test_activations_match_reference(k: int) -> None:
    x = randn(4, 25) * 3
    x[0, :3] = [np.nan, 1e-7, -1e-7]
    compile_and_run(ACTIVATIONS[k], x)


def test_exp_based_activations_are_accurate_near_zero_and_finite_far_out() -> None:
    x = np.array([-1e-6, 1e-6, -1e-30, 100.0, -50.0], np.float32)
    np.testing.assert_allclose(compile_and_run(lambda a: ew.elu(a, alpha=1.0), x),
                               [np.expm1(-1e-6), 1e-6, -1e-30, 100.0, -1.0], rtol=1e-6)
    np.testing.assert_allclose(compile_and_run(ew.softplus, x),
                               np.logaddexp(0, x.astype(np.float64)), rtol=1e-6)


def test_prelu_broadcasts_slope_and_shrink_handles_integers() -> None:
    compile_and_run(ew.prelu, randn(2, 3, 4), randn(3, 1))
    compile_and_run(lambda a: ew.shrink(a, lambd=1.5, bias=1.0), ints(-5, 5, 12, dtype="int32"))


# ---------------------------------------------------------------- bad inputs
def test_type_errors_name_the_op_and_the_expectation() -> None:
    f = relay.Var("f", relay.TensorType((3,), "float32"))
    i = relay.Var("i", relay.TensorType((3,), "int32"))
    with pytest.raises(TypeInferenceError, match="bitwise_and: input has dtype float32, expected an integer"):
        infer_expr(ew.bitwise_and(f, f))
    with pytest.raises(TypeInferenceError, match="add operands must share a dtype, got float32 and int32"):
        infer_expr(ew.add(f, i))
    with pytest.raises(TypeInferenceError, match="slope of shape \\(4,\\) does not broadcast"):
        infer_expr(ew.prelu(f, relay.Var("s", relay.TensorType((4,), "float32"))))
    with pytest.raises(TypeInferenceError, match="where's condition must be bool, got int32"):
        infer_expr(ew.where(i, f, f))
    with pytest.raises(TesseraError, match="approximate='erf' is not valid"):
        ew.gelu(f, approximate="erf")


# ------------------------------------------------------------ ONNX converters
def test_onnx_clip_with_runtime_bounds_and_legacy_attributes() -> None:
    x, lo, hi = randn(3, 4), np.array(-0.3, np.float32), np.array(0.2, np.float32)
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    out = onnx_run(node, {"x": x, "lo": lo, "hi": hi}, TensorProto.FLOAT, opset=13)
    np.testing.assert_array_equal(out, np.clip(x, lo, hi))
    legacy = helper.make_node("Clip", ["x"], ["y"], min=-0.3, max=0.2)
    np.testing.assert_array_equal(onnx_run(legacy, {"x": x}, TensorProto.FLOAT, opset=6), np.clip(x, lo, hi))


@pytest.mark.parametrize("opset,inputs,attrs", [
    (13, ["x", "lo"], {}),        # only min: max defaults to the largest finite float
    (13, ["x", "", "hi"], {}),    # only max: min defaults to the lowest finite float
    (6, ["x"], {"min": 0.0}),     # the attribute form, likewise
    (6, ["x"], {"max": 0.0}),
])
def test_onnx_clip_with_one_bound_clamps_infinities_to_the_finite_limits(opset, inputs, attrs) -> None:
    """ONNX's default bounds are numeric_limits lowest() and max(), so +-inf come out as +-FLT_MAX
    (as onnxruntime gives); NaN stays NaN."""
    x = np.array([np.inf, -np.inf, np.nan, 5.0, -5.0], np.float32)
    feeds = {"x": x, "lo": np.array(0.0, np.float32), "hi": np.array(0.0, np.float32)}
    out = onnx_run(helper.make_node("Clip", inputs, ["y"], **attrs), {k: feeds[k] for k in inputs if k},
                   TensorProto.FLOAT, opset=opset)
    big = np.finfo(np.float32).max
    lo = 0.0 if "lo" in inputs or "min" in attrs else -big
    hi = 0.0 if "hi" in inputs or "max" in attrs else big
    np.testing.assert_array_equal(out, np.array([hi, lo, np.nan, min(5.0, hi), max(-5.0, lo)], np.float32))


def test_onnx_legacy_prelu_slope_is_per_channel() -> None:
    x, slope = randn(2, 3, 3), randn(3)  # last dim == channels: NumPy alignment would be wrong
    out = onnx_run(helper.make_node("PRelu", ["x", "s"], ["y"]), {"x": x, "s": slope}, TensorProto.FLOAT, opset=6)
    np.testing.assert_allclose(out, np.where(x > 0, x, x * slope[:, None]))


def test_onnx_cast_with_a_type_name_and_mean() -> None:
    x = randn(5) * 10
    out = onnx_run(helper.make_node("Cast", ["x"], ["y"], to="INT32"), {"x": x}, TensorProto.INT32, opset=1)
    np.testing.assert_array_equal(out, x.astype(np.int32))
    a, b = randn(5), randn(5)
    out = onnx_run(helper.make_node("Mean", ["a", "b"], ["y"]), {"a": a, "b": b}, TensorProto.FLOAT)
    np.testing.assert_allclose(out, (a + b) / 2)


@pytest.mark.parametrize("node,inputs,message", [
    (helper.make_node("Mod", ["a", "b"], ["y"], fmod=2), 2, "fmod=2 is not valid; expected 0"),
    (helper.make_node("BitShift", ["a", "b"], ["y"], direction="UP"), 2, "direction='UP' is not valid"),
    (helper.make_node("Gelu", ["a"], ["y"], approximate="fast"), 1, "approximate='fast' is not valid"),
    (helper.make_node("Cast", ["a"], ["y"], to=TensorProto.FLOAT8E4M3FN), 1, "FLOAT8E4M3FN is not supported"),
    (helper.make_node("Clip", ["a", "b"], ["y"]), 2, "min must be a scalar"),
])
def test_onnx_unsupported_forms_raise_conversion_errors(node: onnx.NodeProto, inputs: int, message: str) -> None:
    arrays = {"a": ints(1, 5, 3, dtype="int32"), "b": ints(1, 5, 3, dtype="int32")}
    if node.op_type in ("Gelu", "Cast", "Clip"):
        arrays = {"a": randn(3), "b": randn(3)}
    with pytest.raises(ConversionError, match=message):
        onnx_run(node, dict(list(arrays.items())[:inputs]), TensorProto.FLOAT, opset=20)
