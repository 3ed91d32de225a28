"""Neural-network operators: compiled kernels against the ops' NumPy
references, the references against onnx's reference implementation, and
the ONNX converters' handling of unsupported forms."""

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
from tessera.frontend.onnx import from_onnx
from tessera.frontend.onnx.backend import TesseraBackend
from tessera.op.nn import conv, conv_transpose, matmul, norm, pool, softmax
from tessera.relay.expr import Call
from tessera.target import Target
from tessera.target.simd import float32_lanes
from tessera.transform.infer_type import infer_expr

RNG = np.random.default_rng(0)


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def compile_and_check(build: Callable[..., relay.Expr], *arrays: np.ndarray, rtol: float = 1e-5) -> np.ndarray:
    """Compile build(*vars) and compare with the op's own NumPy reference."""
    params = [relay.Var(f"a{k}", relay.TensorType(a.shape, a.dtype.name)) for k, a in enumerate(arrays)]
    body = build(*params)
    out = tessera.build(relay.IRModule.from_expr(relay.Function(tuple(params), body)))(*arrays)[0]
    assert isinstance(body, Call)
    typed = infer_expr(body)
    ref = body.op.reference(list(arrays), body.attrs)
    assert out.dtype == ref.dtype and out.shape == ref.shape == typed.checked_type.shape
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=1e-5)
    return ref


def onnx_reference(op_type: str, inputs: list[np.ndarray], opset: int = 22, outputs: int = 1,
                   **attrs: object) -> list[np.ndarray]:
    """Run one node through onnx's reference evaluator."""
    model = single_node_model(op_type, inputs, opset, outputs, **attrs)
    return ReferenceEvaluator(model).run(None, {f"x{k}": a for k, a in enumerate(inputs)})


def single_node_model(op_type: str, inputs: list[np.ndarray], opset: int = 22, outputs: int = 1,
                      **attrs: object) -> onnx.ModelProto:
    names = [f"x{k}" for k in range(len(inputs))]
    outs = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_onnx(op_type: str, inputs: list[np.ndarray], opset: int = 22, outputs: int = 1,
             **attrs: object) -> tuple[np.ndarray, ...]:
    model = single_node_model(op_type, inputs, opset, outputs, **attrs)
    return TesseraBackend.prepare(model).run(inputs)


# ------------------------------------------------------------- convolution
@pytest.mark.parametrize("d,groups,strides,dilation,pads", [
    (1, 1, (2,), (1,), (1, 0)),
    (2, 2, (1, 2), (2, 1), (1, 2, 0, 1)),
    (2, 4, (1, 1), (1, 1), (1, 1, 1, 1)),  # depthwise
    (3, 1, (1, 2, 1), (1, 1, 2), (0, 1, 1, 1, 0, 0)),
])
def test_conv(d: int, groups: int, strides: tuple, dilation: tuple, pads: tuple) -> None:
    x = randn(2, 4, *(7,) * d)
    w = randn(6 if groups != 4 else 4, 4 // groups, *(3,) * d)
    ref = compile_and_check(lambda a, b: conv.CONV_BY_RANK[d](a, b, strides=strides, padding=pads,
                                                              dilation=dilation, groups=groups), x, w)
    (expected,) = onnx_reference("Conv", [x, w], strides=list(strides), pads=list(pads),
                                 dilations=list(dilation), group=groups)
    np.testing.assert_allclose(ref, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d,groups,strides,dilation,pads", [
    (1, 1, (2,), (1,), (0, -1)),  # a negative end pad is ONNX's output_padding
    (2, 1, (3, 2), (1, 1), (1, 2, 1, 2)),
    (2, 2, (2, 1), (2, 1), (0, 1, -1, 0)),
    (3, 1, (1, 2, 2), (1, 1, 1), (0, 0, 1, 0, 0, 0)),
])
def test_conv_transpose(d: int, groups: int, strides: tuple, dilation: tuple, pads: tuple) -> None:
    x = randn(2, 4, *(4,) * d)
    w = randn(4, 3, *(3,) * d)
    op = conv_transpose.CONV_TRANSPOSE_BY_RANK[d]
    ref = compile_and_check(lambda a, b: op(a, b, strides=strides, padding=pads, dilation=dilation,
                                            groups=groups), x, w)
    # onnx expresses a negative end pad as output_padding
    out_pad = [max(0, -p) for p in pads[d:]]
    onnx_pads = list(pads[:d]) + [max(0, p) for p in pads[d:]]
    # onnx's reference mishandles groups: run it group by group
    icpg = x.shape[1] // groups
    expected = np.concatenate([
        onnx_reference("ConvTranspose", [x[:, g * icpg:(g + 1) * icpg], w[g * icpg:(g + 1) * icpg]],
                       strides=list(strides), pads=onnx_pads, dilations=list(dilation),
                       output_padding=out_pad)[0]
        for g in range(groups)
    ], axis=1)
    np.testing.assert_allclose(ref, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"strides": [3, 2], "output_shape": [10, 8]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER", "output_padding": [1, 0]},
    {"strides": [3, 2], "output_padding": [1, 1], "pads": [1, 0, 0, 1]},
])
def test_conv_transpose_onnx_padding_forms(attrs: dict) -> None:
    x, w, b = randn(1, 2, 3, 3), randn(2, 3, 3, 3), randn(3)
    (expected,) = onnx_reference("ConvTranspose", [x, w, b], **attrs)
    (actual,) = run_onnx("ConvTranspose", [x, w, b], **attrs)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strides,dilation,groups", [((1, 1), (1, 1), 1), ((2, 3), (1, 2), 2), ((1, 2), (2, 1), 1)])
def test_conv_tiled_schedule(strides: tuple, dilation: tuple, groups: int) -> None:
    """16 output channels per group and rows of 37 outputs: several register
    tiles per row, the last one overhanging the output."""
    x, w = randn(1, 4, 9, 80), randn(16 * groups, 4 // groups, 3, 3)
    compile_and_check(lambda a, b: conv.conv2d(a, b, strides=strides, padding=(1, 2, 0, 1), dilation=dilation,
                                               groups=groups), x, w, rtol=1e-4)


def test_conv_and_matmul_use_register_tiles() -> None:
    """The tiled schedules accumulate in a local array (registers), not in memory."""
    x = relay.Var("x", relay.TensorType((1, 8, 10, 20), "float32"))
    w = relay.Var("w", relay.TensorType((16, 8, 3, 3), "float32"))
    a = relay.Var("a", relay.TensorType((32, 32), "float32"))
    body = relay.Tuple((conv.conv2d(x, w, strides=(1, 1), padding=(1,) * 4, dilation=(1, 1)), matmul.matmul(a, a)))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((x, w, a), body)))
    source = "".join(lib.c_sources.values())
    lanes = float32_lanes(Target("c"))
    width = min(max(2 * lanes, 16), 32)  # two vector registers of positions, 16..32
    # the matmul: the packed-panel GEMM microkernel (op/nn/gemm.py) from AVX2 on, else a register tile
    matmul_code = "static void ts_sgemm_" if lanes >= 8 else "float matmul_tile["
    channels = 4 if lanes == 8 else 8  # AVX2's 16 ymm registers hold 4 channels x 2 vectors (conv_schedule)
    assert f"float conv2d_tile[{channels * width}];" in source and matmul_code in source


def test_conv_rejects_channel_mismatch() -> None:
    x = relay.Var("x", relay.TensorType((1, 3, 8, 8), "float32"))
    w = relay.Var("w", relay.TensorType((4, 2, 3, 3), "float32"))
    with pytest.raises(TypeInferenceError, match="3 input channels with groups=1"):
        infer_expr(conv.conv2d(x, w, strides=(1, 1), padding=(0,) * 4, dilation=(1, 1)))


def test_conv_transpose_rejects_empty_output() -> None:
    x = relay.Var("x", relay.TensorType((1, 2, 2), "float32"))
    w = relay.Var("w", relay.TensorType((2, 2, 1), "float32"))
    with pytest.raises(TypeInferenceError, match="empty spatial dim"):
        infer_expr(conv_transpose.conv1d_transpose(x, w, strides=(1,), padding=(1, 1), dilation=(1,)))


# ----------------------------------------------------------------- pooling
@pytest.mark.parametrize("kind", ["max", "avg", "lp"])
@pytest.mark.parametrize("kernel,strides,pads,dilation,ceil", [
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((3, 2), (2, 1), (0, 1, 1, 0), (1, 2), True),
])
def test_pool(kind: str, kernel: tuple, strides: tuple, pads: tuple, dilation: tuple, ceil: bool) -> None:
    x = randn(2, 3, 9, 8)
    extra = {"p": 3.0} if kind == "lp" else {"count_include_pad": True} if kind == "avg" else {}
    table = {"max": pool.max_pool2d, "avg": pool.avg_pool2d, "lp": pool.lp_pool2d}
    compile_and_check(lambda a: table[kind](a, kernel=kernel, strides=strides, padding=pads, dilation=dilation,
                                            ceil_mode=ceil, **extra), x)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_onnx(p: int) -> None:
    x = randn(1, 2, 6, 5)
    attrs = {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 1], "p": p}
    (expected,) = onnx_reference("LpPool", [x], **attrs)
    (actual,) = run_onnx("LpPool", [x], **attrs)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_global_lp_pool() -> None:
    x = randn(2, 3, 4, 5)
    (actual,) = run_onnx("GlobalLpPool", [x], p=3)
    expected = (np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((2, 2, 5, 6), {"kernel_shape": [3, 2], "strides": [1, 2], "storage_order": 0}),  # onnx mishandles 2-d pads
    ((2, 2, 5, 6), {"kernel_shape": [2, 3], "strides": [2, 2], "storage_order": 1}),
    ((1, 2, 4, 5, 3), {"kernel_shape": [2, 2, 2], "dilations": [1, 2, 1], "storage_order": 1}),
])
def test_max_pool_indices(shape: tuple, attrs: dict) -> None:
    x = RNG.integers(0, 4, size=shape).astype("float32")  # ties: the first maximum wins
    expected = onnx_reference("MaxPool", [x], outputs=2, **attrs)
    actual = run_onnx("MaxPool", [x], outputs=2, **attrs)
    for e, a in zip(expected, actual):
        np.testing.assert_array_equal(a, e)


def test_max_pool_indices_op() -> None:
    compile_and_check(lambda a: pool.max_pool_indices(a, kernel=(3, 3), strides=(2, 1), padding=(1, 1, 0, 1),
                                                      dilation=(1, 1), ceil_mode=True, storage_order=1),
                      randn(2, 3, 7, 6))


def test_max_pool_rejects_bad_storage_order() -> None:
    with pytest.raises(ConversionError, match="storage_order=2 is not valid"):
        from_onnx(single_node_model("MaxPool", [randn(1, 1, 4, 4)], outputs=2, kernel_shape=[2, 2],
                                    storage_order=2))


def test_pool_rejects_wrong_rank() -> None:
    x = relay.Var("x", relay.TensorType((1, 3, 8), "float32"))
    with pytest.raises(TypeInferenceError, match="a 2-d pool needs 4-d input"):
        infer_expr(pool.max_pool2d(x, kernel=(2, 2), strides=(1, 1), padding=(0,) * 4, dilation=(1, 1)))


# ----------------------------------------------------------------- softmax
@pytest.mark.parametrize("op", [softmax.softmax, softmax.log_softmax, softmax.hardmax])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family(op, axis: int) -> None:
    x = randn(3, 4, 5)
    x[0, 0, :2] = 7.0  # a tie: hardmax takes the first
    compile_and_check(lambda a: op(a, axis=axis), x)


def test_hardmax_reference() -> None:
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 0]], dtype=np.float32)
    ref = softmax.hardmax.reference([x], softmax.SoftmaxAttrs(axis=1))
    np.testing.assert_array_equal(ref, [[0, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, -1), (13, 1), (13, 0)])
def test_softmax_opset_semantics(opset: int, axis: int) -> None:
    """Before opset 13 the input is coerced to 2-d at `axis` (onnx's reference
    evaluator ignores that, so the oracle is written out here)."""
    x = randn(2, 3, 4)
    refs = {"Softmax": softmax.softmax, "LogSoftmax": softmax.log_softmax, "Hardmax": softmax.hardmax}
    for op_type, op in refs.items():
        if opset < 13:
            a = axis % x.ndim
            flat = x.reshape(int(np.prod(x.shape[:a])), -1)
            expected = op.reference([flat], softmax.SoftmaxAttrs(axis=1)).reshape(x.shape)
        else:
            (expected,) = onnx_reference(op_type, [x], opset=opset, axis=axis)
        (actual,) = run_onnx(op_type, [x], opset=opset, axis=axis)
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_softmax_rejects_bad_axis() -> None:
    x = relay.Var("x", relay.TensorType((2, 3), "float32"))
    with pytest.raises(TypeInferenceError, match="axis 2 out of range"):
        infer_expr(softmax.hardmax(x, axis=2))


# ---------------------------------------------------------- matrix products
@pytest.mark.parametrize("a_shape,b_shape", [((3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)),
                                             ((2, 3, 4), (4,)),
                                             ((12, 7), (7, 32)), ((2, 1, 8, 5), (3, 5, 24))])  # register tiles
def test_matmul(a_shape: tuple, b_shape: tuple) -> None:
    compile_and_check(matmul.matmul, randn(*a_shape), randn(*b_shape))


def test_dense() -> None:
    compile_and_check(matmul.dense, randn(3, 4), randn(5, 4))


def test_matmul_rejects_inner_mismatch() -> None:
    a = relay.Var("a", relay.TensorType((3, 4), "float32"))
    b = relay.Var("b", relay.TensorType((5, 2), "float32"))
    with pytest.raises(TypeInferenceError, match="inner dimensions differ"):
        infer_expr(matmul.matmul(a, b))


# ---------------------------------------------------------- normalisations
def test_batch_norm_and_lrn() -> None:
    x = randn(2, 3, 4, 5)
    stats = [randn(3), randn(3), randn(3), np.abs(randn(3)) + 0.5]
    compile_and_check(lambda *a: norm.batch_norm(*a, epsilon=1e-3), x, *stats)
    compile_and_check(lambda a: norm.lrn(a, size=3, alpha=1e-3, beta=0.75, bias=1.0), x)


@pytest.mark.parametrize("beta", [0.5, 0.75, 1.0, 0.6])
def test_lrn_powers(beta: float) -> None:
    """0.5, 0.75 and 1 are computed by square roots (0.75: sqrt(s) * sqrt(sqrt(s))), others by pow; a big
    alpha puts the base well away from 1, where a wrong power would show."""
    x = randn(1, 8, 6, 7) * 3
    compile_and_check(lambda a: norm.lrn(a, size=5, alpha=2.0, beta=beta, bias=1.5), x, rtol=2e-6)


def test_batch_norm_training_mode() -> None:
    x, stats = randn(2, 3, 4, 5), [randn(3), randn(3), randn(3), np.abs(randn(3)) + 0.5]
    attrs = {"training_mode": 1, "momentum": 0.8, "epsilon": 1e-3}
    expected = onnx_reference("BatchNormalization", [x, *stats], opset=15, outputs=3, **attrs)
    actual = run_onnx("BatchNormalization", [x, *stats], opset=15, outputs=3, **attrs)
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type,inputs,attrs,opset", [
    ("InstanceNormalization", [(2, 3, 4, 5), (3,), (3,)], {"epsilon": 1e-3}, 22),
    ("LayerNormalization", [(2, 3, 4, 5), (4, 5), (4, 5)], {"axis": 2}, 17),
    ("LayerNormalization", [(2, 3, 5), (5,)], {}, 17),
    ("GroupNormalization", [(2, 6, 3, 2), (6,), (6,)], {"num_groups": 3}, 21),
    ("GroupNormalization", [(2, 6, 3, 2), (3,), (3,)], {"num_groups": 3}, 18),
    ("MeanVarianceNormalization", [(3, 2, 4, 2)], {"axes": [0, 2]}, 13),
    ("LpNormalization", [(3, 4)], {"p": 2}, 22),
])
def test_normalizations_match_onnx(op_type: str, inputs: list, attrs: dict, opset: int) -> None:
    arrays = [randn(*s) for s in inputs]
    outputs = 3 if op_type == "LayerNormalization" else 1
    expected = onnx_reference(op_type, arrays, opset=opset, outputs=outputs, **attrs)
    actual = run_onnx(op_type, arrays, opset=opset, outputs=outputs, **attrs)
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


def test_l1_normalization() -> None:
    """onnx's reference evaluator forgets the absolute value for p=1."""
    x = randn(3, 4)
    (actual,) = run_onnx("LpNormalization", [x], axis=0, p=1)
    np.testing.assert_allclose(actual, x / np.abs(x).sum(axis=0, keepdims=True), rtol=1e-5)


def test_lp_normalization_rejects_p3() -> None:
    with pytest.raises(ConversionError, match="LpNormalization takes p=1 or p=2"):
        from_onnx(single_node_model("LpNormalization", [randn(2, 3)], p=3))


# ----------------------------------------------------------------- dropout
def test_dropout_inference_is_identity() -> None:
    x = randn(3, 4)
    y, mask = run_onnx("Dropout", [x, np.float32(0.3)], outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()


def test_dropout_training_mode_rejected() -> None:
    model = single_node_model("Dropout", [randn(3, 4), np.float32(0.3), np.bool_(True)])
    with pytest.raises(ConversionError, match="training mode"):
        TesseraBackend.prepare(model).run([randn(3, 4), np.float32(0.3), np.bool_(True)])
