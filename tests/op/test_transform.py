"""Data-movement operators: compiled code against the NumPy references and NumPy itself."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import relay
from tessera.errors import ConversionError, KernelFailure, TypeInferenceError
from tessera.frontend.onnx import from_onnx
from tessera.op import transform as tf
from tessera.op import transform_fill as tfill
from tessera.op import transform_gather as tg
from tessera.op import transform_pad as tpad
from tessera.op import transform_resize as tr
from tessera.op import transform_scan as tscan
from tessera.op import transform_scatter as ts
from tessera.relay.expr import Call, Constant
from tessera.transform.infer_type import infer_expr

RNG = np.random.default_rng(0)


def compile_and_run(build: Callable[..., relay.Expr], *arrays: np.ndarray) -> np.ndarray:
    """Compile build(*vars) with one variable per array; check against the op's reference too."""
    params = [relay.Var(f"a{k}", relay.TensorType(a.shape, a.dtype.name)) for k, a in enumerate(arrays)]
    body = build(*params)
    out = tessera.build(relay.IRModule.from_expr(relay.Function(tuple(params), body)))(*arrays)[0]
    if isinstance(body, Call):
        typed = infer_expr(body)
        args = [arrays[params.index(a)] if a in params else np.asarray(a.data) for a in body.args]
        ref = body.op.reference(args, body.attrs)
        assert out.dtype == ref.dtype and out.shape == ref.shape == typed.checked_type.shape
        np.testing.assert_array_equal(out, ref)
    return out


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------- transform.py
@pytest.mark.parametrize("begin,end,strides", [
    ((0, 1), (3, 4), (1, 2)),
    ((-1, 5), (-10**9, -10**9), (-1, -2)),  # negative steps run to the start
    ((10, -100), (-100, 100), (-2, 1)),  # begins clamped into the axis
    ((1, 0), (1, 5), (1, 1)),  # empty
    ((-100, 4), (-100, 0), (-1, -1)),  # ONNX: a negative step clamps begin to 0, not "empty"
])
def test_strided_slice(begin: tuple, end: tuple, strides: tuple) -> None:
    x = randn(4, 6)
    compile_and_run(lambda a: tf.strided_slice(a, begin=begin, end=end, strides=strides), x)


def test_strided_slice_matches_numpy_inside_bounds() -> None:
    x = randn(5, 7)
    out = compile_and_run(lambda a: tf.strided_slice(a, begin=(4, 1), end=(0, 7), strides=(-2, 3)), x)
    np.testing.assert_array_equal(out, x[4:0:-2, 1:7:3])


def test_strided_slice_onnx_clamping() -> None:
    assert tf.slice_axis(-100, -100, -1, 6) == (0, 1)  # begin clamped to 0, end to -1 (NumPy: empty)
    assert tf.slice_axis(-100, 4, -1, 6) == (0, 0)
    assert tf.slice_axis(100, -100, -1, 6) == (5, 6)
    assert tf.slice_axis(2, 100, 3, 6) == (2, 2)


def test_broadcast_to_and_tile() -> None:
    x = randn(3, 1)
    np.testing.assert_array_equal(compile_and_run(lambda a: tf.broadcast_to(a, shape=(2, 3, 4)), x),
                                  np.broadcast_to(x, (2, 3, 4)))
    np.testing.assert_array_equal(compile_and_run(lambda a: tf.tile(a, reps=(2, 3)), x), np.tile(x, (2, 3)))


def test_concatenate_three_parts() -> None:
    a, b, c = randn(2, 1), randn(2, 3), randn(2, 2)
    out = compile_and_run(lambda p, q, r: tf.concatenate(p, q, r, axis=-1), a, b, c)
    np.testing.assert_array_equal(out, np.concatenate([a, b, c], axis=1))


def test_concatenate_with_empty_inputs() -> None:
    a, b = randn(2, 0), randn(2, 3)
    out = compile_and_run(lambda p, q: tf.concatenate(p, q, p, axis=1), a, b)
    np.testing.assert_array_equal(out, b)


# -------------------------------------------------------- transform_gather.py
@pytest.mark.parametrize("indices,axis", [
    (np.array(2, dtype=np.int64), 1),  # a scalar index removes the axis
    (np.array([[0, -1], [-4, 3]], dtype=np.int64), 1),
    (np.array([-3, 0, 2], dtype=np.int32), 0),
])
def test_take(indices: np.ndarray, axis: int) -> None:
    x = randn(3, 4, 2)
    out = compile_and_run(lambda a, i: tg.take(a, i, axis=axis), x, indices)
    np.testing.assert_array_equal(out, np.take(x, indices, axis=axis))


def test_take_refuses_out_of_range_indices() -> None:
    x = randn(5)
    out = compile_and_run(lambda a, i: tg.take(a, i, axis=0), x, np.array([4, -5], dtype=np.int64))
    np.testing.assert_array_equal(out, x[[4, 0]])
    with pytest.raises(KernelFailure, match="index out of range"):  # it used to clamp 7 to 4
        compile_and_run(lambda a, i: tg.take(a, i, axis=0), x, np.array([7, -5], dtype=np.int64))


def test_gather_elements_with_negative_indices() -> None:
    x = randn(3, 4)
    idx = RNG.integers(-4, 4, size=(2, 4)).astype(np.int64)
    out = compile_and_run(lambda a, i: tg.gather_elements(a, i, axis=1), x, idx)
    np.testing.assert_array_equal(out, np.take_along_axis(x[:2], idx % 4, axis=1))


def test_gather_nd_batch_dims() -> None:
    x = randn(2, 3, 4)
    idx = np.array([[[1, 2]], [[-1, 0]]], dtype=np.int64)  # (batch 2, 1 tuple, q = 2)
    out = compile_and_run(lambda a, i: tg.gather_nd(a, i, batch_dims=1), x, idx)
    np.testing.assert_array_equal(out, np.stack([x[0, 1, 2], x[1, 2, 0]]).reshape(2, 1))


def test_reverse_sequence() -> None:
    x = randn(4, 3, 2)
    lens = np.array([4, 0, 2], dtype=np.int64)
    out = compile_and_run(lambda a, n: tg.reverse_sequence(a, n, time_axis=0, batch_axis=1), x, lens)
    expected = x.copy()
    for b, n in enumerate(lens):
        expected[:n, b] = x[:n, b][::-1]
    np.testing.assert_array_equal(out, expected)


# ------------------------------------------------------- transform_scatter.py
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction: str) -> None:
    data, upd = randn(3, 5), randn(2, 3)
    idx = np.array([[0, -1, 0], [4, 2, 0]], dtype=np.int64)  # duplicates on row 0
    out = compile_and_run(lambda d, i, u: ts.scatter_elements(d, i, u, axis=1, reduction=reduction), data, idx, upd)
    expected = data.copy()
    combine = {"none": lambda o, n: n, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    for r, c in np.ndindex(idx.shape):
        expected[r, idx[r, c] % 5] = combine[reduction](expected[r, idx[r, c] % 5], upd[r, c])
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd(reduction: str) -> None:
    data = randn(4, 3)
    idx = np.array([[1], [-1], [1]], dtype=np.int64)
    upd = randn(3, 3)
    out = compile_and_run(lambda d, i, u: ts.scatter_nd(d, i, u, reduction=reduction), data, idx, upd)
    expected = data.copy()
    if reduction == "none":
        expected[1], expected[3] = upd[2], upd[1]
    else:
        expected[1] = data[1] + upd[0] + upd[2]
        expected[3] = data[3] + upd[1]
    np.testing.assert_array_equal(out, expected)


# ----------------------------------------------------------- transform_pad.py
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("widths", [((1, 2), (0, 3)), ((5, 7), (4, 0))])  # wider than the axes too
def test_pad_modes(mode: str, widths: tuple) -> None:
    x = randn(3, 2)
    value = np.array(1.5, dtype=np.float32)
    out = compile_and_run(lambda a, v: tpad.pad(a, v, pad_width=widths, mode=mode), x, value)
    kwargs = {"constant_values": 1.5} if mode == "constant" else {}
    np.testing.assert_array_equal(out, np.pad(x, widths, mode=mode, **kwargs))


def test_pad_negative_widths_crop() -> None:
    x = randn(4, 5)
    out = compile_and_run(lambda a: tpad.pad(a, Constant(np.zeros((), "float32")), pad_width=((-1, 2), (1, -3)),
                                             mode="edge"), x)
    np.testing.assert_array_equal(out, np.pad(x[1:, :2], ((0, 2), (1, 0)), mode="edge"))


# --------------------------------------------- transform_fill.py / _scan.py
def test_one_hot() -> None:
    idx = np.array([[0, -1], [5, 2]], dtype=np.int64)  # 5 is out of range: all off
    values = np.array([-1, 7], dtype=np.int32)
    out = compile_and_run(lambda i, v: tfill.one_hot(i, v, depth=3, axis=1), idx, values)
    expected = np.full((2, 3, 2), -1, dtype=np.int32)
    expected[0, 0, 0], expected[0, 2, 1], expected[1, 2, 1] = 7, 7, 7
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("upper,k", [(True, 0), (True, -1), (False, 2), (False, -5)])
def test_trilu(upper: bool, k: int) -> None:
    x = randn(2, 3, 4)
    out = compile_and_run(lambda a: tfill.trilu(a, k=k, upper=upper), x)
    np.testing.assert_array_equal(out, (np.triu if upper else np.tril)(x, k))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(exclusive: bool, reverse: bool) -> None:
    x = randn(3, 5)
    out = compile_and_run(lambda a: tscan.cumsum(a, axis=1, exclusive=exclusive, reverse=reverse), x)
    y = x[:, ::-1] if reverse else x
    expected = np.cumsum(y, axis=1) - (y if exclusive else 0)
    np.testing.assert_allclose(out, expected[:, ::-1] if reverse else expected, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------- transform_resize.py
def test_resample_linear_with_extrapolation() -> None:
    x = randn(2, 3)
    idx = np.array([[0, 1], [-1, 0], [1, 2]], dtype=np.int32)  # row 1 lies outside the input
    w = np.array([[0.75, 0.25], [1.0, 0.0], [0.5, 0.5]])
    out = compile_and_run(
        lambda a: tr.resample(a, Constant(idx), Constant(w), axis=1, out_dtype="float32", fill_value=9.0), x)
    expected = np.stack([0.75 * x[:, 0] + 0.25 * x[:, 1], np.full(2, 9.0), 0.5 * (x[:, 1] + x[:, 2])], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_resample_to_integers_rounds_and_saturates() -> None:
    x = np.array([[100, 120]], dtype=np.int8)
    idx, w = np.array([[0, 1], [1, 1]], dtype=np.int32), np.array([[0.5, 0.5], [1.0, 1.0]])
    out = compile_and_run(lambda a: tr.resample(a, Constant(idx), Constant(w), axis=1, out_dtype="int8"), x)
    np.testing.assert_array_equal(out, [[110, 127]])


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("build,match", [
    (lambda: tg.take(relay.Var("x", relay.TensorType((3,), "float32")), Constant(np.array([0.5]))),
     "indices must have an integer dtype"),
    (lambda: tf.strided_slice(relay.Var("x", relay.TensorType((3,), "float32")), begin=(0,), end=(3,), strides=(0,)),
     "slice step cannot be 0"),
    (lambda: tpad.pad(relay.Var("x", relay.TensorType((3,), "float32")), Constant(np.zeros((), "float32")),
                      pad_width=((1, 1),), mode="mirror"), "pad mode 'mirror' is not valid"),
    (lambda: tf.broadcast_to(relay.Var("x", relay.TensorType((3,), "float32")), shape=(2, 4)),
     r"cannot broadcast shape \(3,\) to \(2, 4\)"),
    (lambda: ts.scatter_elements(relay.Var("d", relay.TensorType((3,), "float32")), Constant(np.zeros(2, "int64")),
                                 Constant(np.zeros(2, "float32")), reduction="sum"), "reduction 'sum' is not valid"),
])
def test_type_errors(build: Callable[[], relay.Expr], match: str) -> None:
    with pytest.raises(TypeInferenceError, match=match):
        infer_expr(build())


# --------------------------------------------------------- ONNX converters
def _model(node: onnx.NodeProto, inputs: list, opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_pad_rejects_unknown_mode() -> None:
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="mirror")
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, 1], dtype=np.int64), "pads"))
    with pytest.raises(ConversionError, match="mode='mirror' is not valid; expected one of constant, edge"):
        from_onnx(model)


def test_resize_rejects_unknown_coordinate_mode() -> None:
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], coordinate_transformation_mode="diagonal")
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, 2], dtype=np.float32), "scales"))
    with pytest.raises(ConversionError, match="coordinate_transformation_mode='diagonal' is not valid"):
        from_onnx(model)


def test_split_uneven_sizes_are_rejected() -> None:
    node = helper.make_node("Split", ["x", "split"], ["y", "z"], axis=0)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([2, 2], dtype=np.int64), "split"))
    with pytest.raises(ConversionError, match=r"split sizes \[2, 2\] do not add up to the axis length 5"):
        from_onnx(model)


def test_resize_opset10_nearest_rounds_like_onnxruntime() -> None:
    """Opset 10 has no nearest_mode: floor when upsampling, ceil when downsampling."""
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode="nearest")
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5])], opset=10)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([2, 0.6], dtype=np.float32), "scales"))
    mod, params = from_onnx(model)
    x = np.arange(5, dtype=np.float32).reshape(1, 5)
    out = tessera.build(mod, params=params)(x)[0]
    np.testing.assert_array_equal(out, [[0, 2, 4], [0, 2, 4]])
