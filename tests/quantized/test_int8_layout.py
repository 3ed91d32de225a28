"""Int8Layout: the int8 region channels innermost on Cortex-M (structure, weights, numerics)."""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import onnx
import pytest

import tessera
from tessera.backend.build_module import bind_params, optimize
from tessera.frontend import from_onnx
from tessera.op import qnn
from tessera.op import qnn_add_pool as qap
from tessera.op import transform as tf
from tessera.op.nn.conv import ConvAttrs
from tessera.op.nn.pool import PoolAttrs
from tessera.op.qnn_nhwc import TO_NCHW, nchw_weight, nhwc_weight, qavg_pool2d_nhwc, qconv2d_nhwc
from tessera.relay.expr import Call, Constant, Expr, Function, Var
from tessera.relay.module import IRModule
from tessera.relay.ty import TensorType
from tessera.relay.visitor import iter_calls
from tessera.target.target import Target
from tessera.testing import mlperf_tiny as mt
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.transform.int8_layout import Int8Layout, int8_layout, wants_int8_nhwc
from tessera.transform.pass_infra import PassContext

from .test_qnn import ort_reference

logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
RNG = np.random.default_rng(15)
M4 = Target("c -mcpu=cortex-m4")


def _int8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape, dtype=np.int8)


def _optimised(name: str) -> IRModule:
    mod, params = from_onnx(onnx.load(q8.model_path(name)))
    return optimize(mod.with_function("main", bind_params(mod.main, params)), PassContext())


def _ops(func: Function) -> Counter:
    return Counter(c.op.name for c in iter_calls(func.body))


def test_the_target_decides():
    assert wants_int8_nhwc(M4) and wants_int8_nhwc(Target("c -mcpu=cortex-m55"))
    assert not wants_int8_nhwc(Target("c"))
    mod = _optimised("ic_resnet8")
    assert Int8Layout(Target("c"))(mod, PassContext()) is mod


def test_resnet8_is_nhwc_with_one_transpose_at_each_edge():
    before = _optimised("ic_resnet8")
    after = Int8Layout(M4)(before, PassContext()).main
    ops = _ops(after)
    assert ops["qnn.conv2d"] == 0 and ops["qnn.avg_pool2d"] == 0
    assert ops["qnn.conv2d_nhwc"] == _ops(before.main)["qnn.conv2d"] == 9
    assert ops["qnn.avg_pool2d_nhwc"] == 1
    # the 3-channel input is transposed once, right after it is quantised; the pool's 1 x 1 map
    # leaves as a reshape (same bytes), so nothing else converts a layout
    transposes = [c for c in iter_calls(after.body) if c.op is tf.transpose]
    assert len(transposes) == 1
    (edge,) = transposes
    assert isinstance(edge.args[0], Call) and edge.args[0].op is qnn.quantize
    assert isinstance(edge.args[0].args[0], Var)
    for add in (c for c in iter_calls(after.body) if c.op is qap.qadd):
        assert all(a.checked_type.shape[3] in (16, 32, 64) for a in add.args)  # channels innermost


def test_weights_are_reordered_at_compile_time():
    before = [c for c in iter_calls(_optimised("ic_resnet8").main.body) if c.op is qnn.qconv2d]
    after = [c for c in iter_calls(Int8Layout(M4)(_optimised("ic_resnet8"), PassContext()).main.body)
             if c.op is qconv2d_nhwc]
    assert len(before) == len(after)
    for old, new in zip(before, after):
        assert isinstance(new.args[1], Constant)  # a constant in flash, no kernel reorders it
        attrs = old.attrs_as(qnn.QConvAttrs)
        np.testing.assert_array_equal(new.args[1].data, nhwc_weight(old.args[1].data, attrs))
        np.testing.assert_array_equal(nchw_weight(new.args[1].data, attrs), old.args[1].data)
    w = np.arange(2 * 3 * 2 * 2, dtype=np.int8).reshape(2, 12)  # (oc, c, ky, kx) flat
    attrs = qnn.QConvAttrs(ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1)), (2, 2), 0, qnn.Requant(8, 0))
    assert nhwc_weight(w, attrs)[0].tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]  # (ky, kx, c)


def test_depthwise_graphs_stay_nchw_until_their_kernel_pays():
    mod = _optimised("kws_ds_cnn")
    assert int8_layout(mod.main, mod) is mod.main


def test_resnet8_on_host_matches_onnxruntime_after_the_pass():
    model = onnx.load(q8.model_path("ic_resnet8"))
    x = mt.sample_input("ic_resnet8")
    mod = _optimised("ic_resnet8")
    nhwc = Int8Layout(M4)(mod, PassContext())
    assert _ops(nhwc.main)["qnn.conv2d_nhwc"] == 9
    lib = tessera.build(nhwc)
    np.testing.assert_array_equal(lib(x)[0], ort_reference(model, x))


def _conv_call(x: Expr, groups: int, stride: int, pads: tuple[int, ...], kernel: int = 3, channels: int = 8) -> Call:
    w = _int8(8, channels // groups * kernel * kernel)
    attrs = qnn.QConvAttrs(ConvAttrs((stride, stride), pads, (1, 1), groups), (kernel, kernel), -7,
                           qnn.Requant(20, 5, -3, 127))
    bias = Constant(RNG.integers(-5000, 5000, 8, dtype=np.int32))
    mult = Constant(RNG.integers(2000, 4000, 8, dtype=np.int32))
    return Call(qnn.qconv2d, (x, Constant(w), bias, mult), attrs)


@pytest.mark.parametrize("groups, stride, pads, kernel", [
    (1, 1, (1, 1, 1, 1), 3), (1, 2, (0, 0, 1, 1), 3), (1, 1, (0, 0, 0, 0), 1), (1, 2, (0, 0, 0, 0), 1),
    (4, 1, (1, 1, 1, 1), 3), (8, 2, (0, 1, 1, 0), 3)])
def test_nhwc_kernels_match_the_nchw_reference(groups, stride, pads, kernel):
    x = Var("x", TensorType((1, 8, 9, 11), "int8"))
    conv = _conv_call(x, groups, stride, pads, kernel)
    pool = Call(qap.qavg_pool2d, (conv,), qap.QPoolAttrs(PoolAttrs((2, 2), (2, 2), (0, 0, 0, 0), (1, 1)), 5, 3,
                                                           qnn.Requant(4, -2)))
    func = Function((x,), pool)
    mod = IRModule.from_expr(func)
    nhwc = int8_layout(mod.main, mod)
    ops = _ops(nhwc)
    if groups == 1:
        assert ops["qnn.conv2d_nhwc"] == 1 and ops["qnn.avg_pool2d_nhwc"] == 1 and ops["transpose"] == 2
    data = _int8(1, 8, 9, 11)
    expected = tessera.build(mod)(data)[0]
    np.testing.assert_array_equal(expected, qap.qavg_pool2d.reference(
        [qnn.qconv2d.reference([data, *(a.data for a in conv.args[1:])], conv.attrs)], pool.attrs))
    np.testing.assert_array_equal(tessera.build(IRModule.from_expr(nhwc))(data)[0], expected)


@pytest.mark.parametrize("nhwc_output", [False, True])
def test_the_transposes_of_an_nhwc_import_cancel(nhwc_output):
    # as an NHWC (TFLite) file imports: the float input transposed to NCHW, then quantised
    x = Var("x", TensorType((1, 9, 11, 8), "float32"))
    scale, zp = Constant(np.array([0.05], np.float32)), Constant(np.array([-7], np.int8))
    q = Call(qnn.quantize, (Call(tf.transpose, (x,), tf.TransposeAttrs(TO_NCHW)), scale, zp), qnn.QuantizeAttrs())
    conv = _conv_call(q, 1, 1, (1, 1, 1, 1))
    y: Expr = Call(qnn.dequantize, (conv, scale, zp), qnn.DequantizeAttrs())
    if nhwc_output:  # and its NHWC output transposed back from NCHW
        y = Call(tf.transpose, (y,), tf.TransposeAttrs((0, 2, 3, 1)))
    func = Function((x,), y)
    mod = IRModule.from_expr(func)
    nhwc = int8_layout(mod.main, mod)
    transposes = [c for c in iter_calls(nhwc.body) if c.op is tf.transpose]
    if nhwc_output:
        assert transposes == []  # the region is the whole graph
    else:
        assert len(transposes) == 1 and transposes[0].args[0].op is qconv2d_nhwc  # only the output edge is left
    data = RNG.normal(size=(1, 9, 11, 8)).astype(np.float32)
    np.testing.assert_array_equal(tessera.build(IRModule.from_expr(nhwc))(data)[0], tessera.build(mod)(data)[0])


@pytest.mark.parametrize("groups, stride, pads", [(4, 1, (1, 1, 1, 1)), (8, 2, (0, 1, 1, 0)), (1, 1, (2, 0, 1, 1))])
def test_the_nhwc_conv_matches_the_nchw_reference_on_its_own(groups, stride, pads):
    conv = _conv_call(Var("x", TensorType((1, 8, 9, 11), "int8")), groups, stride, pads)
    attrs = conv.attrs_as(qnn.QConvAttrs)
    x = _int8(1, 9, 11, 8)
    v = Var("x", TensorType(x.shape, "int8"))
    w, bias, mult = (a.data for a in conv.args[1:])
    call = Call(qconv2d_nhwc, (v, Constant(nhwc_weight(w, attrs)), *conv.args[2:]), attrs)
    got = tessera.build(IRModule.from_expr(Function((v,), call)))(x)[0]
    expected = qnn.qconv2d.reference([x.transpose(TO_NCHW), w, bias, mult], attrs).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(got, expected)


def test_the_pool_op_matches_its_reference_on_its_own():
    attrs = qap.QPoolAttrs(PoolAttrs((3, 3), (1, 1), (0, 0, 0, 0), (1, 1)), 5, 3, qnn.Requant(4, -2))
    x = _int8(1, 7, 6, 16)
    v = Var("x", TensorType(x.shape, "int8"))
    got = tessera.build(IRModule.from_expr(Function((v,), Call(qavg_pool2d_nhwc, (v,), attrs))))(x)[0]
    expected = qap.qavg_pool2d.reference([x.transpose(TO_NCHW)], attrs).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(got, expected)
