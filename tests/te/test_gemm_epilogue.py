"""An extern GEMM's elementwise tail run inside its calls (te/gemm_epilogue.py): the tail read as steps, the
tails that must stay a pass of their own, and whole models built with and without the fusion, bit for bit."""

from __future__ import annotations

import importlib
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import te
from tessera.codegen.c_library import calling_units
from tessera.frontend import from_onnx
from tessera.te.gemm_epilogue import LINEAR_STEPS, GemmOutput, Step, match_epilogue
from tessera.tir.structural import structural_equal
from tessera.testing.isa import require_level
from tessera.testing.models import ort_run
from tessera.tir import expr as E
from tessera.tir.buffer import Buffer

lower_module = importlib.import_module("tessera.te.lower")  # (the package re-exports `lower`, the function)

# ---------------------------------------------------------------- the tail as steps, no compiler
OUT = Buffer("out", (1, 8, 4, 4), "float32")
BIAS = Buffer("bias", (8, 1, 1), "float32")
RESIDUAL = Buffer("res", (1, 8, 4, 4), "float32")
AXES = tuple(te.axis(extent, name) for extent, name in zip(OUT.shape, "nchw"))
CONV = GemmOutput((1,), (2, 3), lambda ins, out, epilogue: te.call_extern("unused"))
ZERO, SIX = E.const(0.0, "float32"), E.const(6.0, "float32")


def _c() -> E.PrimExpr:
    """C's element: `out` at the tail's own index (the batch axis of extent 1 reads 0, as after lowering)."""
    n, c, h, w = AXES
    return E.BufferLoad(OUT, (E.IntImm(0), c.var, h.var, w.var), "float32")


def _bias() -> E.BufferLoad:
    return E.BufferLoad(BIAS, (AXES[1].var, E.IntImm(0), E.IntImm(0)), "float32")


def _residual() -> E.BufferLoad:
    return E.BufferLoad(RESIDUAL, (E.IntImm(0), *(a.var for a in AXES[1:])), "float32")


def _relu(v: E.PrimExpr) -> E.PrimExpr:
    return E.select(E.lt(v, ZERO), ZERO, v)


def test_bias_then_relu_is_a_row_add_and_a_clamp() -> None:
    epilogue = match_epilogue(_relu(E.add(_c(), _bias())), OUT, AXES, CONV)
    assert epilogue is not None
    assert epilogue.steps == (Step.ADD_ROW, Step.CLAMP_LT)
    assert epilogue.operands == (_bias(),) and epilogue.constants == (0.0,)
    assert epilogue.program == int(Step.ADD_ROW) | int(Step.CLAMP_LT) << 4


def test_relu6_residual_on_the_left_and_a_constant_first_clamp_keep_their_order() -> None:
    value = E.add(_residual(), E.add(_c(), _bias()))  # res + (C + bias): adds commute bit for bit
    lower = E.select(E.le(value, ZERO), ZERO, value)
    clamped = E.select(E.lt(SIX, lower), SIX, lower)  # 6 < v ? 6 : v is v > 6 ? 6 : v
    epilogue = match_epilogue(clamped, OUT, AXES, CONV)
    assert epilogue is not None
    assert epilogue.steps == (Step.ADD_ROW, Step.ADD_ELEMENT, Step.CLAMP_LE, Step.CLAMP_GT)
    assert epilogue.operands == (_bias(), _residual()) and epilogue.constants == (0.0, 6.0)


def test_a_dense_layers_bias_runs_along_the_columns() -> None:
    out, bias = Buffer("out", (1, 5, 12), "float32"), Buffer("bias", (12,), "float32")
    axes = tuple(te.axis(extent, name) for extent, name in zip(out.shape, "bmn"))
    c = E.BufferLoad(out, (E.IntImm(0), axes[1].var, axes[2].var), "float32")
    matrix = GemmOutput((0, 1), (2,), CONV.fused_body)
    epilogue = match_epilogue(E.add(c, E.BufferLoad(bias, (axes[2].var,), "float32")), out, axes, matrix)
    assert epilogue is not None and epilogue.steps == (Step.ADD_COLUMN,)
    scaled = match_epilogue(E.mul(c, E.const(0.125, "float32")), out, axes, matrix)
    assert scaled is not None and scaled.steps == (Step.MUL_CONSTANT,) and scaled.constants == (0.125,)


def test_the_arguments_point_each_operand_where_the_call_starts() -> None:
    """A call whose C starts at channel 4 (the second group of 4): the bias from its element 4, the residual
    from the same element as C; unused slots are 0."""
    start = (E.IntImm(0), E.IntImm(4), E.IntImm(0), E.IntImm(0))
    epilogue = match_epilogue(_relu(E.add(E.add(_c(), _bias()), _residual())), OUT, AXES, CONV)
    assert epilogue is not None
    program, bias, residual, f0, f1, no_map = epilogue.arguments(start)
    assert isinstance(program, E.IntImm) and program.value == epilogue.program
    assert isinstance(bias, E.BufferPtr) and bias.buffer is BIAS and E.is_const(bias.offset, 4)
    assert isinstance(residual, E.BufferPtr) and residual.buffer is RESIDUAL and E.is_const(residual.offset, 4 * 16)
    assert E.is_const(f0, 0.0) and E.is_const(f1, 0.0) and E.is_const(no_map, 0)
    scaled = match_epilogue(E.mul(E.add(_c(), _bias()), SIX), OUT, AXES, CONV)
    assert scaled is not None
    _, bias, unused, six, unused_constant, _ = scaled.arguments(start)
    assert E.is_const(unused, 0) and E.is_const(six, 6.0) and E.is_const(unused_constant, 0.0)


def _channel_bias_indexed_by_height() -> E.PrimExpr:
    wrong = E.BufferLoad(BIAS, (AXES[2].var, E.IntImm(0), E.IntImm(0)), "float32")  # bias[h]: no row, no column
    return E.add(_c(), wrong)


def _silu(v: E.PrimExpr) -> E.PrimExpr:
    """v / (1 + exp(-v)), as the frontend writes Sigmoid then Mul."""
    return E.div(v, E.add(E.const(1.0, "float32"), E.call(E.Intrinsic.EXP, [E.neg(v)], "float32")))


def test_silu_after_the_bias_is_a_map_and_keeps_its_place_before_a_residual() -> None:
    epilogue = match_epilogue(E.add(_silu(E.add(_c(), _bias())), _residual()), OUT, AXES, CONV)
    assert epilogue is not None
    assert epilogue.steps == (Step.ADD_ROW, Step.MAP, Step.ADD_ELEMENT)
    assert epilogue.operands == (_bias(), _residual()) and epilogue.constants == ()
    assert epilogue.map is not None and structural_equal(epilogue.map.body, _silu(epilogue.map.var))
    *_, element_map = epilogue.arguments((0, 0, 0, 0))
    assert element_map is epilogue.map


def test_a_map_is_a_function_of_one_value() -> None:
    """tanh(C + bias) is a map of C + bias; exp(C + bias) + C is a function of C and the bias (no map of
    one value computes it), so it stays a pass."""
    two_reads = E.add(E.call(E.Intrinsic.EXP, [E.add(_c(), _bias())], "float32"), _c())
    assert match_epilogue(two_reads, OUT, AXES, CONV) is None
    tanh = match_epilogue(E.call(E.Intrinsic.TANH, [E.add(_c(), _bias())], "float32"), OUT, AXES, CONV)
    assert tanh is not None and tanh.steps == (Step.ADD_ROW, Step.MAP)
    assert tanh.map is not None and structural_equal(
        tanh.map.body, E.call(E.Intrinsic.TANH, [tanh.map.var], "float32"))


def test_a_kernel_without_maps_leaves_a_silu_tail_to_a_pass() -> None:
    linear = GemmOutput((1,), (2, 3), CONV.fused_body, LINEAR_STEPS)
    assert match_epilogue(_silu(E.add(_c(), _bias())), OUT, AXES, linear) is None
    assert match_epilogue(_relu(E.add(_c(), _bias())), OUT, AXES, linear) is not None


def test_a_kernel_with_maps_last_takes_no_step_after_one() -> None:
    depthwise = GemmOutput((1,), (2, 3), CONV.fused_body, map_last=True)
    last = match_epilogue(_silu(E.add(_c(), _bias())), OUT, AXES, depthwise)
    assert last is not None and last.steps == (Step.ADD_ROW, Step.MAP)
    assert match_epilogue(E.add(_silu(E.add(_c(), _bias())), _residual()), OUT, AXES, depthwise) is None


def _silu_of_another_value() -> E.PrimExpr:
    """C / (1 + exp(-(C + bias))): the numerator is not the exponent's value."""
    one = E.const(1.0, "float32")
    return E.div(_c(), E.add(one, E.call(E.Intrinsic.EXP, [E.neg(E.add(_c(), _bias()))], "float32")))


def _exp(v: E.PrimExpr) -> E.PrimExpr:
    return E.call(E.Intrinsic.EXP, [v], "float32")


@pytest.mark.parametrize("value, why", [
    (_silu_of_another_value, "a function of C and of C plus the bias"),
    (lambda: E.div(_c(), E.add(_c(), _bias())), "a function of C and the bias"),
    (lambda: _exp(E.mul(_c(), E.const(2.0, "float32"))), "a map after a product (it may add to it: an FMA)"),
    (lambda: E.add(E.mul(_c(), _exp(_c())), _residual()), "a map ending in a product, then an add (an FMA)"),
    (lambda: E.add(E.neg(E.mul(_c(), _exp(_c()))), _residual()), "a negated product, then an add (an FMA)"),
    (lambda: E.call("user_fn", [_c()], "float32"), "a call of a C function"),
    (lambda: E.add(E.mul(_c(), E.const(2.0, "float32")), _bias()), "x * c + y: one FMA in the separate pass"),
    (lambda: E.add(E.add(E.add(_c(), _bias()), _residual()), _bias()), "three operands"),
    (_channel_bias_indexed_by_height, "an operand along part of the column run"),
    (lambda: E.add(E.BufferLoad(OUT, (E.IntImm(0), AXES[1].var, AXES[3].var, AXES[2].var), "float32"), _bias()),
     "C at another element"),
    (lambda: _bias(), "no C at all"),
])
def test_other_tails_stay_a_pass_of_their_own(value, why) -> None:
    assert match_epilogue(value(), OUT, AXES, CONV) is None, why


@pytest.mark.parametrize("value, why", [
    (lambda: E.select(E.lt(_c(), ZERO), ZERO, _c(), guarded=True), "a guarded select"),
    (lambda: E.select(E.lt(_c(), SIX), ZERO, _c()), "a select to another constant than its bound"),
    (lambda: E.select(E.lt(_c(), E.const(float("nan"), "float32")), E.const(float("nan"), "float32"), _c()),
     "a NaN bound"),
])
def test_selects_that_are_no_clamp_are_a_map(value, why) -> None:
    epilogue = match_epilogue(value(), OUT, AXES, CONV)
    assert epilogue is not None and epilogue.steps == (Step.MAP,), why


# ---------------------------------------------------------------- whole models, fused and not
def _model(nodes: list, inputs: list, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "tail", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _tail(tail: str, residual_shape: list[int], rng: np.random.Generator, lo: float = 0.0):
    """`tail` after a Conv's output "c" into "y": its nodes, extra inputs, extra feed and initializers (the
    Clip bounds `lo` and 0.5, the scale 0.75)."""
    inits = [numpy_helper.from_array(np.array(lo, np.float32), "lo"), numpy_helper.from_array(np.array(0.5, np.float32), "hi"),
             numpy_helper.from_array(np.array(0.75, np.float32), "s")]
    nodes, inputs, feed = [], [], {}
    if tail == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif tail == "clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif tail == "scale_clip":
        nodes += [helper.make_node("Mul", ["c", "s"], ["m"]), helper.make_node("Clip", ["m", "lo", "hi"], ["y"])]
    elif tail == "residual_relu":
        nodes += [helper.make_node("Add", ["c", "r"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, residual_shape))
        feed["r"] = rng.standard_normal(residual_shape).astype(np.float32)
    elif tail == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["g"]), helper.make_node("Mul", ["c", "g"], ["y"])]
    elif tail == "gelu_tanh":  # as GPT-2 writes it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        inits += [numpy_helper.from_array(np.array(v, np.float32), n)
                  for n, v in (("three", 3.0), ("k", 0.044715), ("root", 0.7978845608), ("one", 1.0), ("half", 0.5))]
        nodes += [helper.make_node("Pow", ["c", "three"], ["cube"]), helper.make_node("Mul", ["cube", "k"], ["kc"]),
                  helper.make_node("Add", ["c", "kc"], ["inner"]), helper.make_node("Mul", ["inner", "root"], ["u"]),
                  helper.make_node("Tanh", ["u"], ["t"]), helper.make_node("Add", ["t", "one"], ["t1"]),
                  helper.make_node("Mul", ["c", "t1"], ["xt"]), helper.make_node("Mul", ["xt", "half"], ["y"])]
    elif tail == "gelu_erf":  # as BERT and ViT exports write it: x (1 + erf(x / sqrt 2)) / 2
        inits += [numpy_helper.from_array(np.array(v, np.float32), n)
                  for n, v in (("root2", 1.4142135), ("one", 1.0), ("half", 0.5))]
        nodes += [helper.make_node("Div", ["c", "root2"], ["scaled"]), helper.make_node("Erf", ["scaled"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["c", "e1"], ["xe"]),
                  helper.make_node("Mul", ["xe", "half"], ["y"])]
    elif tail == "hard_swish":
        nodes.append(helper.make_node("HardSwish", ["c"], ["y"]))
    elif tail == "silu_residual":
        nodes += [helper.make_node("Sigmoid", ["c"], ["g"]), helper.make_node("Mul", ["c", "g"], ["silu"]),
                  helper.make_node("Add", ["silu", "r"], ["y"])]
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, residual_shape))
        feed["r"] = rng.standard_normal(residual_shape).astype(np.float32)
    return nodes, inputs, feed, inits


def _conv_tail_model(conv: onnx.NodeProto, weight: np.ndarray, x_shape: list[int], out_shape: list[int], tail: str,
                     rng: np.random.Generator, lo: float = 0.0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """`conv` (inputs x, w, b) with `weight` and a seeded bias, then `tail`."""
    nodes, inputs, feed, inits = _tail(tail, out_shape, rng, lo)
    inits += [numpy_helper.from_array(weight, "w"),
              numpy_helper.from_array(rng.standard_normal(out_shape[1]).astype(np.float32), "b")]
    feed["x"] = rng.standard_normal(x_shape).astype(np.float32)
    return _model([conv, *nodes], [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape), *inputs], inits), feed


def _conv_model(tail: str, groups: int = 1) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A 1x1 Conv with bias (ragged against every register tile: 42 output channels, 13 x 11 positions, a
    batch of 2), then `tail`."""
    rng = np.random.default_rng(len(tail) + groups)
    c, oc, hw = 24, 42, (13, 11)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1], group=groups)
    weight = rng.standard_normal((oc, c // groups, 1, 1)).astype(np.float32)
    return _conv_tail_model(conv, weight, [2, c, *hw], [2, oc, *hw], tail, rng)


def _matmul_model(tail: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """(1, 37, 40) x a constant (40, 50), then `tail`: a bias and a residual, or a bias and a GELU; or a
    batched product of two inputs, scaled."""
    rng = np.random.default_rng(7)
    if tail.startswith("gelu"):
        matmul = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["c"])]
        nodes, inputs, feed, inits = _tail(tail, [1, 37, 50], rng)
        inits += [numpy_helper.from_array(rng.standard_normal((40, 50)).astype(np.float32), "w"),
                  numpy_helper.from_array(rng.standard_normal(50).astype(np.float32), "b")]
        feed["x"] = rng.standard_normal((1, 37, 40)).astype(np.float32)
        return _model([*matmul, *nodes], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 37, 40])], inits), feed
    if tail == "scaled_batch":
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in (("q", [3, 37, 24]), ("k", [3, 24, 37]))]
        nodes = [helper.make_node("MatMul", ["q", "k"], ["m"]), helper.make_node("Mul", ["m", "s"], ["y"])]
        inits = [numpy_helper.from_array(np.array(0.125, np.float32), "s")]
        feed = {"q": rng.standard_normal((3, 37, 24)).astype(np.float32),
                "k": rng.standard_normal((3, 24, 37)).astype(np.float32)}
        return _model(nodes, inputs, inits), feed
    inits = [numpy_helper.from_array(rng.standard_normal((40, 50)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(50).astype(np.float32), "b")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 37, 40]),
              helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 37, 50])]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Add", ["a", "r"], ["y"])]
    feed = {"x": rng.standard_normal((1, 37, 40)).astype(np.float32), "r": rng.standard_normal((1, 37, 50)).astype(np.float32)}
    return _model(nodes, inputs, inits), feed


def _fused_calls(lib) -> list[str]:
    """The fused entries the kernels call (not their declarations or inline definitions, whose first
    parameter is typed)."""
    return re.findall(r"\b(ts_\w+_fused)\((?!int(?:32|64)_t )", "".join(calling_units(lib.c_sources).values()))


def _run(lib, feed: dict[str, np.ndarray], threads: int) -> np.ndarray:
    module = tessera.GraphModule(lib, num_threads=threads, adaptive_threads=False)
    for name, value in feed.items():
        module.set_input(name, value)
    module.run()
    return module.get_output(0)


CASES = [(_conv_model, "relu", {}), (_conv_model, "clip", {}), (_conv_model, "residual_relu", {}),
         (_conv_model, "relu", {"groups": 2}), (_matmul_model, "bias_residual", {}), (_matmul_model, "scaled_batch", {}),
         (_conv_model, "silu", {}), (_conv_model, "silu_residual", {}), (_conv_model, "hard_swish", {}),
         (_matmul_model, "gelu_tanh", {}), (_matmul_model, "gelu_erf", {})]
# maps run outside the tile's registers (ts_sgemm_epilogue_apply) on every ISA: the AVX2 branch too
TARGETS = {"silu_residual": ("c", "c -mcpu=x86-64-v3"), "gelu_tanh": ("c", "c -mcpu=x86-64-v3")}
TARGET_CASES = [(*case, target) for case in CASES for target in TARGETS.get(case[1], ("c",))]


@pytest.mark.parametrize("make, tail, extra, target", TARGET_CASES,
                         ids=[f"{m.__name__[1:]}-{t}{'-g2' if e else ''}{'-' + g.split('=')[1] if '=' in g else ''}"
                              for m, t, e, g in TARGET_CASES])
def test_fused_tails_compute_what_the_separate_pass_computes(make, tail, extra, target, monkeypatch) -> None:
    model, feed = make(tail, **extra)
    mod, params = from_onnx(model)
    fused = tessera.build(mod, params=params, target=target)
    assert _fused_calls(fused), "the tail runs inside the calls"
    monkeypatch.setattr(lower_module, "match_epilogue", lambda *args: None)
    separate = tessera.build(mod, params=params, target=target)
    assert not _fused_calls(separate)
    if "=" in target:
        require_level(target.split("=")[1])
    want = ort_run(model, feed)[0]
    for threads in (1, 2):
        got = _run(fused, feed, threads)
        np.testing.assert_array_equal(got, _run(separate, feed, threads), err_msg=f"{threads} threads")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- the depthwise kernel's tail
def _depthwise_model(tail: str, hw: tuple[int, int] = (11, 9)) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A 3x3 depthwise Conv with bias on 13 channels (a block of 8 and one of 5), a batch of 2, `hw` positions
    (99: ragged against the kernel's runs of 8; 2x2: fewer than one run), then `tail`."""
    rng = np.random.default_rng(len(tail) + hw[0])
    c = 13
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4, group=c)
    weight = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    return _conv_tail_model(conv, weight, [2, c, *hw], [2, c, *hw], tail, rng, lo=-0.25)


_DEPTHWISE_CALL = re.compile(r"ts_depthwise2d_float32\(.*, (\d+)(?:, [^,]+){5}\);$", re.MULTILINE)
DEPTHWISE_CASES = [("relu", (11, 9)), ("clip", (11, 9)), ("scale_clip", (11, 9)), ("residual_relu", (11, 9)),
                   ("residual_relu", (2, 2)), ("silu", (11, 9)), ("hard_swish", (2, 2))]


def test_the_depthwise_kernel_leaves_a_map_before_a_residual_to_a_separate_pass() -> None:
    """It runs a map only as the program's last step (on each band it stored): SiLU then a residual add stays
    a pass, and is right."""
    model, feed = _depthwise_model("silu_residual")
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target="c -mcpu=x86-64-v3")
    assert {int(p) for p in _DEPTHWISE_CALL.findall("".join(calling_units(lib.c_sources).values()))} == {0}
    require_level("x86-64-v3")
    np.testing.assert_allclose(_run(lib, feed, 1), ort_run(model, feed)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tail, hw", DEPTHWISE_CASES, ids=[f"{t}-{h}x{w}" for t, (h, w) in DEPTHWISE_CASES])
def test_the_depthwise_kernel_runs_the_tail_as_the_separate_pass_would(tail, hw, monkeypatch) -> None:
    """Bias and constant steps run on the position vectors (a lane per channel); a residual makes the whole
    program run on the channel vectors after the transpose back. Channels past the block's five and
    positions past the last full run of eight are computed but not stored."""
    model, feed = _depthwise_model(tail, hw)
    mod, params = from_onnx(model)
    fused = tessera.build(mod, params=params, target="c -mcpu=x86-64-v3")
    programs = {int(p) for p in _DEPTHWISE_CALL.findall("".join(calling_units(fused.c_sources).values()))}
    assert programs and 0 not in programs, "the tail runs inside the depthwise calls"
    monkeypatch.setattr(lower_module, "match_epilogue", lambda *args: None)
    separate = tessera.build(mod, params=params, target="c -mcpu=x86-64-v3")
    assert {int(p) for p in _DEPTHWISE_CALL.findall("".join(calling_units(separate.c_sources).values()))} == {0}
    require_level("x86-64-v3")
    want = ort_run(model, feed)[0]
    for threads in (1, 2):
        got = _run(fused, feed, threads)
        np.testing.assert_array_equal(got, _run(separate, feed, threads), err_msg=f"{threads} threads")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
