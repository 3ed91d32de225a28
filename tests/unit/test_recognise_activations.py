"""RecogniseActivations: SiLU, hard-swish and both GELUs, as exporters decompose
them, become one operator (before/after IR), compute what onnxruntime computes,
and fuse into the producer's kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import relay
from tessera.frontend.onnx import from_onnx
from tessera.op import elemwise as ew
from tessera.relay.expr import Call
from tessera.relay.structural import structural_equal
from tessera.testing.models import ort_run
from tessera.backend.build_module import bind_params, optimize
from tessera.transform import InferType, PassContext, RecogniseActivations

SHAPE = [2, 8, 5, 5]


def _node(op: str, inputs: list[str], output: str, **attrs: object) -> helper.NodeProto:
    return helper.make_node(op, inputs, [output], **attrs)


def _model(nodes: list[helper.NodeProto], constants: dict[str, float], with_conv: bool = False):
    """x (through a 1x1 Conv when `with_conv`, as `h`) -> nodes -> y."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in constants.items()]
    if with_conv:
        weight = (rng.standard_normal((SHAPE[1], SHAPE[1], 1, 1)) * 0.5).astype(np.float32)
        bias = np.full(SHAPE[1], 0.1, np.float32)
        inits += [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
        nodes = [_node("Conv", ["x", "w", "b"], "h"), *nodes]
    else:
        nodes = [_node("Identity", ["x"], "h"), *nodes]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
# name -> (nodes reading h and writing y, constants, the operator it becomes)
CASES = {
    "silu": ([_node("Sigmoid", ["h"], "s"), _node("Mul", ["h", "s"], "y")], {}, "nn.silu"),
    "silu_sigmoid_first": ([_node("Sigmoid", ["h"], "s"), _node("Mul", ["s", "h"], "y")], {}, "nn.silu"),
    "hard_sigmoid_times_x": ([_node("HardSigmoid", ["h"], "s", alpha=1 / 6), _node("Mul", ["h", "s"], "y")], {},
                             "nn.hard_swish"),
    "x_relu6_over_6": ([_node("Add", ["h", "three"], "a"), _node("Clip", ["a", "zero", "six"], "r"),
                        _node("Mul", ["h", "r"], "m"), _node("Div", ["m", "six"], "y")],
                       {"three": 3.0, "zero": 0.0, "six": 6.0}, "nn.hard_swish"),
    "gelu_erf_torch": ([_node("Div", ["h", "sqrt2"], "d"), _node("Erf", ["d"], "e"), _node("Add", ["e", "one"], "a"),
                        _node("Mul", ["h", "a"], "m"), _node("Mul", ["m", "half"], "y")],
                       {"sqrt2": math.sqrt(2), "one": 1.0, "half": 0.5}, "nn.gelu"),
    "gelu_erf_half_first": ([_node("Mul", ["h", "rsqrt2"], "d"), _node("Erf", ["d"], "e"),
                             _node("Add", ["one", "e"], "a"), _node("Mul", ["half", "h"], "hh"),
                             _node("Mul", ["hh", "a"], "y")],
                            {"rsqrt2": math.sqrt(0.5), "one": 1.0, "half": 0.5}, "nn.gelu"),
    "gelu_tanh_gpt2": ([_node("Pow", ["h", "three"], "p"), _node("Mul", ["k", "p"], "kp"),
                        _node("Add", ["h", "kp"], "a"),
                        _node("Mul", ["s", "a"], "sa"), _node("Tanh", ["sa"], "t"), _node("Add", ["one", "t"], "t1"),
                        _node("Mul", ["half", "h"], "hh"), _node("Mul", ["hh", "t1"], "y")],
                       {"three": 3.0, "k": 0.044715, "s": SQRT_2_OVER_PI, "one": 1.0, "half": 0.5}, "nn.gelu"),
    "gelu_tanh_cube_by_products": ([_node("Mul", ["h", "h"], "h2"), _node("Mul", ["h", "h2"], "p"),
                                    _node("Mul", ["p", "k"], "kp"), _node("Add", ["kp", "h"], "a"),
                                    _node("Mul", ["a", "s"], "sa"), _node("Tanh", ["sa"], "t"),
                                    _node("Add", ["t", "one"], "t1"), _node("Mul", ["h", "t1"], "m"),
                                    _node("Mul", ["m", "half"], "y")],
                                   {"k": 0.044715, "s": SQRT_2_OVER_PI, "one": 1.0, "half": 0.5}, "nn.gelu"),
}


def _main_calls(model) -> list[str]:
    mod, params = from_onnx(model)
    out = optimize(relay.IRModule.from_expr(bind_params(mod.main, params)), PassContext())
    body = out.main.body
    names = []
    while isinstance(body, Call):
        names.append(body.op.name)
        body = body.args[0]
    return names


@pytest.mark.parametrize("name", sorted(CASES))
def test_decomposed_activation_becomes_one_operator(name: str) -> None:
    nodes, constants, op = CASES[name]
    assert _main_calls(_model(nodes, constants)) == [op]


@pytest.mark.parametrize("name", sorted(CASES))
def test_recognised_activation_matches_onnxruntime_and_fuses(name: str) -> None:
    nodes, constants, op = CASES[name]
    model = _model(nodes, constants, with_conv=True)
    x = (np.random.default_rng(1).standard_normal(SHAPE) * 3).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.0]
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    kernels = [n for n in lib.module.function_names if n.startswith("tsgen_default_fused")]
    assert len(kernels) == 1 and op.split(".")[-1] in kernels[0]  # the conv and its whole tail: one kernel
    got, ref = lib(x)[0], ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6, equal_nan=True)


def test_near_miss_constants_and_other_inputs_stay_decomposed() -> None:
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    y = relay.Var("y", relay.TensorType((4,), "float32"))
    half, one = relay.const(np.float32(0.5)), relay.const(np.float32(1.0))
    other_input = ew.multiply(x, ew.sigmoid(y))
    wrong_scale = ew.multiply(ew.multiply(x, half), ew.add(ew.erf(ew.divide(x, relay.const(np.float32(1.5)))), one))
    for body in (other_input, wrong_scale):
        before = InferType()(relay.IRModule.from_expr(relay.Function((x, y), body)))
        assert structural_equal(RecogniseActivations()(before).main, before.main)


def test_silu_before_after() -> None:
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    before = InferType()(relay.IRModule.from_expr(relay.Function((x,), ew.multiply(ew.sigmoid(x), x))))
    x2 = relay.Var("x", relay.TensorType((4,), "float32"))
    expected = InferType()(relay.IRModule.from_expr(relay.Function((x2,), ew.silu(x2))))
    assert structural_equal(RecogniseActivations()(before).main, expected.main)
