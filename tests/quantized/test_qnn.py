"""int8: quantised MLPerf Tiny models, QDQ / QLinear import, integer kernels, host runs against onnxruntime."""

from __future__ import annotations

import logging
import re
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.backend.build_module import bind_params, optimize
from tessera.errors import TesseraError
from tessera.frontend import from_onnx
from tessera.op import qnn
from tessera.op import qnn_add_pool as qap
from tessera.op.nn.conv import ConvAttrs
from tessera.op.nn.pool import PoolAttrs
from tessera.relay.expr import Constant, Function, Var
from tessera.relay.module import IRModule
from tessera.relay.ty import TensorType
from tessera.relay.visitor import iter_calls
from tessera.testing import mlperf_tiny as mt
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.testing.models import ort_run
from tessera.transform.pass_infra import PassContext

logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
NAMES = list(mt.MODELS)
FORMATS = [(q8.QuantFormat.QDQ, True), (q8.QuantFormat.QOPERATOR, True), (q8.QuantFormat.QOPERATOR, False)]
FLOAT_KERNELS = {"nn.conv2d", "nn.dense", "nn.matmul", "nn.avg_pool2d", "mean", "add"}


def ort_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime with graph optimisations off: DequantizeLinear -> float op -> QuantizeLinear, as ONNX defines."""
    return ort_run(model, {"input": x}, optimize=False)[0]


def ops_after_optimize(model: onnx.ModelProto) -> Counter:
    mod, params = from_onnx(model)
    opt = optimize(IRModule.from_expr(bind_params(mod.main, params)), PassContext.current())
    return Counter(c.op.name for c in iter_calls(opt.main))


def output_step(model: onnx.ModelProto) -> float:
    """Scale of the last DequantizeLinear (the output's quantisation step)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    return float(inits[last.input[1]])


# ----------------------------------------------------------- the test models
def test_quantised_models_are_deterministic_and_int8():
    a = q8.quantize("kws_ds_cnn")
    assert a.SerializeToString() == q8.quantize("kws_ds_cnn").SerializeToString()
    ops = Counter(n.op_type for n in a.graph.node)
    assert ops["QuantizeLinear"] == 14 and ops["Conv"] == 9 and "BatchNormalization" not in ops
    weights = [numpy_helper.to_array(t) for t in a.graph.initializer if t.name.endswith("weight_quantized")]
    assert weights and all(w.dtype == np.int8 for w in weights)
    qop = Counter((n.domain, n.op_type) for n in q8.quantize("ic_resnet8", fmt=q8.QuantFormat.QOPERATOR).graph.node)
    assert qop[("", "QLinearConv")] == 9 and qop[("com.microsoft", "QLinearAdd")] == 3


@pytest.mark.parametrize("name", NAMES)
def test_folding_batch_norms_keeps_the_function(name):
    model = mt.build(name)
    x = mt.sample_input(name)
    folded = q8.fold_batch_norms(model)
    assert "BatchNormalization" not in {n.op_type for n in folded.graph.node}
    np.testing.assert_allclose(ort_run(folded, {"input": x})[0], ort_run(model, {"input": x})[0], rtol=1e-4, atol=1e-5)


# -------------------------------------------------- host runs vs onnxruntime
@pytest.mark.parametrize("fmt, per_channel", FORMATS, ids=["qdq", "qop", "qop-per-tensor"])
@pytest.mark.parametrize("name", NAMES)
def test_int8_models_on_host_match_onnxruntime(name, fmt, per_channel, record_property):
    record_property("suite", "MLPerf Tiny int8 on the host vs onnxruntime")
    model = onnx.load(q8.model_path(name, fmt=fmt, per_channel=per_channel))
    x = mt.sample_input(name)
    ops = ops_after_optimize(model)
    assert ops["qnn.conv2d"] + ops["qnn.dense"] >= 10 and not FLOAT_KERNELS & set(ops), ops
    mod, params = from_onnx(model)
    y = tessera.build(mod, params=params)(x)[0]
    # bit-exact with ONNX's definition (onnxruntime without graph optimisations)
    np.testing.assert_array_equal(y, ort_reference(model, x))
    record_property("steps_from_ort_optimised", steps_from_optimised_session(model, x, y))


def steps_from_optimised_session(model: onnx.ModelProto, x: np.ndarray, y: np.ndarray) -> float:
    """How many output steps `y` is from onnxruntime's optimised int8 session: information only, never a test.

    Its fused kernels (QLinearSoftmax's table, the u8s8 GEMMs) round differently by CPU: 1 step on
    AVX-512 machines, 2 on AVX2 ones. ONNX's definition is the unoptimised session, which is exact.
    """
    return float(np.max(np.abs(y - ort_run(model, {"input": x})[0])) / output_step(model))


# ------------------------------------------------------------ fixed point
def test_fixed_point_multipliers_are_precise_and_fit_31_bits():
    reals = np.array([0.0123, 0.0456, 0.9, 0.0071])  # spanning less than 2^7: float32's 24 bits or better
    m, shift = qnn.fixed_point(reals)
    assert m.dtype == np.int32 and np.abs(m).max() < 2**31 and np.abs(m).max() >= 2**30
    np.testing.assert_allclose(m / 2.0**shift, reals, rtol=2.0**-24)
    m, shift = qnn.fixed_point([0.9, 1.7e-5])  # one shift per op: the small channel keeps fewer bits
    assert abs(m[1] / 2.0**shift - 1.7e-5) <= 2.0 ** -(shift + 1)


def test_requantisation_rounds_half_up_or_to_even():
    acc = np.array([5, 6, 7, -5, -6, -7])  # times 1/4: 1.25 1.5 1.75 -1.25 -1.5 -1.75
    one = np.ones((), np.int64)
    assert qnn.requantize_ref(acc, one, 2, 0, -128, 127).tolist() == [1, 2, 2, -1, -1, -2]
    assert qnn.requantize_ref(acc, one, 2, 0, -128, 127, half_even=True).tolist() == [1, 2, 2, -1, -2, -2]
    assert qnn.requantize_ref(np.array([10**6]), one, 2, 3, -128, 127).tolist() == [127]


# -------------------------------------------- integer kernels vs references
def _run_call(make, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    vars_ = [Var(f"x{k}", TensorType(a.shape, a.dtype.name)) for k, a in enumerate(inputs)]
    call = make(*vars_)
    lib = tessera.build(IRModule.from_expr(Function(tuple(vars_), call)))
    expected = call.op.reference(
        [*inputs, *(a.data for a in call.args[len(inputs):])], call.attrs)  # type: ignore[union-attr]
    return lib(*inputs)[0], expected


RNG = np.random.default_rng(7)


def _int8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape, dtype=np.int8)


@pytest.mark.parametrize("groups, stride, pads", [(1, 1, (1, 1, 1, 1)), (1, 2, (0, 0, 1, 1)), (4, 1, (1, 1, 1, 1)),
                                                  (4, 2, (0, 1, 1, 0))])
def test_qconv2d_matches_its_reference(groups, stride, pads):
    w = _int8(8, 4 // groups * 9)
    attrs = qnn.QConvAttrs(ConvAttrs((stride, stride), pads, (1, 1), groups), (3, 3), -7, qnn.Requant(20, 5, -3, 127))
    bias = Constant(RNG.integers(-5000, 5000, 8, dtype=np.int32))
    mult = Constant(RNG.integers(2000, 4000, 8, dtype=np.int32))
    got, expected = _run_call(lambda x: qnn.qconv2d(x, Constant(w), bias, mult, **attrs.__dict__), [_int8(1, 4, 9, 11)])
    assert got.dtype == np.int8 and len(np.unique(got)) > 20
    np.testing.assert_array_equal(got, expected)


def _kernel_workspaces(lib) -> list[str]:
    """The C types of the kernels' writable pointer parameters: outputs and planned workspaces."""
    sigs = re.findall(r"^TS_EXPORT int32_t tsgen_default_\w+\((.*)\) \{$", "\n".join(lib.c_sources.values()), re.M)
    assert sigs
    return [p.split("*")[0].strip() for sig in sigs for p in sig.split(", ") if not p.startswith("const ")]


@pytest.mark.parametrize("groups", [1, 4, 8], ids=["conv", "grouped", "depthwise"])
def test_integer_kernels_requantise_in_registers(groups):
    """The int32 sums never reach memory: the only planned buffers are int8 (padding, im2col), and
    the saturation is one `ts_ssat8_int32` (SSAT on Cortex-M)."""
    x = Var("x", TensorType((1, 8, 6, 7), "int8"))
    attrs = qnn.QConvAttrs(ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), groups), (3, 3), 2, qnn.Requant(20, 5, 0, 127))
    conv = qnn.qconv2d(x, Constant(_int8(8, 8 // groups * 9)), Constant(np.zeros(8, np.int32)),
                       Constant(np.full(8, 3000, np.int32)), **attrs.__dict__)
    flat = Var("y", TensorType((3, 37), "int8"))
    dense = qnn.qdense(flat, Constant(_int8(10, 37)), Constant(np.zeros(10, np.int32)),
                       Constant(np.array([3000], np.int32)), input_zero_point=3, requant=qnn.Requant(20, -2))
    for params, call in (((x,), conv), ((flat,), dense)):
        lib = tessera.build(IRModule.from_expr(Function(params, call)))
        assert set(_kernel_workspaces(lib)) == {"int8_t"}
        assert "ts_ssat8_int32(" in "".join(lib.c_sources.values())


def test_qdense_qadd_and_qpool_match_their_references():
    w = _int8(10, 37)
    got, expected = _run_call(lambda x: qnn.qdense(x, Constant(w), Constant(np.arange(10, dtype=np.int32)),
                                                   Constant(np.array([3000], np.int32)), input_zero_point=3,
                                                   requant=qnn.Requant(20, -2)), [_int8(2, 37)])
    np.testing.assert_array_equal(got, expected)
    add = qap.QAddAttrs(4, 3 << 20, -9, 5 << 19, qnn.Requant(22, 1, 1, 127))
    got, expected = _run_call(lambda a, b: qap.qadd(a, b, **add.__dict__), [_int8(1, 3, 5, 5), _int8(1, 3, 5, 5)])
    np.testing.assert_array_equal(got, expected)
    pool = qap.QPoolAttrs(PoolAttrs((2, 3), (2, 3), (0, 0, 0, 0), (1, 1)), -3, 1 << 20, qnn.Requant(23, 2))
    got, expected = _run_call(lambda x: qap.qavg_pool2d(x, **pool.__dict__), [_int8(1, 3, 8, 9)])
    np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------------------- errors
def _qdq_model(dtype: int, scale_as_input: bool = False) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array([0], np.int16 if dtype == TensorProto.INT16 else np.int8), "zp")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    if scale_as_input:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]))
    else:
        inits.append(numpy_helper.from_array(np.array([0.1], np.float32), "s"))
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="quant_in"),
         helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dequant_out")],
        "qdq", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_unsupported_quantisation_names_the_node():
    with pytest.raises(TesseraError, match=r"node 'quant_in' \(QuantizeLinear.*int16 is not supported"):
        from_onnx(_qdq_model(TensorProto.INT16))
    with pytest.raises(TesseraError, match=r"node 'quant_in'.*scale must be known at compile time"):
        from_onnx(_qdq_model(TensorProto.INT8, scale_as_input=True))


def test_a_lone_quantize_dequantize_pair_runs_as_onnx_defines():
    model = _qdq_model(TensorProto.INT8)
    model.ir_version = 10
    mod, params = from_onnx(model)
    x = np.array([[0.05, 0.15, -0.25, 100.0]], np.float32)  # two ties (to even) and saturation
    np.testing.assert_array_equal(tessera.build(mod, params=params)(x)[0], ort_run(model, {"x": x})[0])
