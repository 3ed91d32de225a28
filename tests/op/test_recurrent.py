"""Recurrent layers (ONNX LSTM, GRU, RNN) against onnxruntime, and the shape
of their kernels: a loop over time whose code does not grow with the sequence."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.backend.build_module import bind_params
from tessera.errors import ConversionError, InvalidValueError, KernelFailure
from tessera.frontend import from_onnx
from tessera.op.nn import recurrent as rec
from tessera.relay.expr import Call, Constant, Tuple, TupleGetItem
from tessera.transform.fold_constant import fold_expr
from tessera.transform.infer_type import infer_expr

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
F = TensorProto.FLOAT


def layer_model(op: str, seq: int, batch: int = 3, width: int = 5, hidden: int = 7, direction: str = "forward",
                runtime: tuple[str, ...] = (), layout: int = 0, opset: int = 22, seed: int = 0,
                **attrs: object) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One `op` node with weights as initializers; the inputs named in `runtime` (X always) are fed.

    Returns the model and its feeds. Optional inputs: B always; initial_h,
    initial_c, P and sequence_lens when named in `runtime`.
    """
    rng = np.random.default_rng(seed)
    dirs, g = (2 if direction == "bidirectional" else 1), GATES[op]

    def rand(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    batch_first = lambda shape: [shape[1], shape[0], *shape[2:]] if layout else list(shape)  # noqa: E731
    values = {"X": rand(*batch_first([seq, batch, width]), scale=1.0), "W": rand(dirs, g * hidden, width),
              "R": rand(dirs, g * hidden, hidden), "B": rand(dirs, 2 * g * hidden, scale=0.2),
              "sequence_lens": rng.integers(1, seq + 1, batch).astype(np.int32),
              "initial_h": rand(*batch_first([dirs, batch, hidden])),
              "initial_c": rand(*batch_first([dirs, batch, hidden])), "P": rand(dirs, 3 * hidden, scale=0.2)}
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c", "P"] if op == "LSTM" else [])
    used = {"X", "W", "R", "B", *runtime}
    inputs = [name if name in used else "" for name in order]
    while inputs[-1] == "":
        inputs.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    if layout:
        attrs["layout"] = layout
    node = helper.make_node(op, inputs, outputs, hidden_size=hidden, direction=direction, **attrs)
    fed = ["X", *[n for n in runtime if n != "X"]]
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else F, values[n].shape)
         for n in fed],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        initializer=[numpy_helper.from_array(values[n], n) for n in used if n not in fed])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, {n: values[n] for n in fed}


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], executor: str = "graph",
          oracle: Callable[[onnx.ModelProto, dict[str, np.ndarray]], list[np.ndarray]] = ort_run) -> None:
    expected = oracle(model, feeds)
    mod, params = from_onnx(model)
    args = [feeds[i.name] for i in model.graph.input if i.name in feeds]
    if executor == "aot":
        actual = tessera.build(mod, params=params, executor="aot", mod_name="m").run_host(args)
    else:
        actual = tessera.build(mod, params=params)(*args)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------ against onnxruntime
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layer_matches_onnxruntime(op, direction):
    check(*layer_model(op, 50, direction=direction))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_initial_states_and_sequence_lengths(op):
    """Rows shorter than the sequence: Y is zero past their end, Y_h (and Y_c) are their last
    state, and a reverse pass starts at each row's own last step."""
    runtime = ("X", "sequence_lens", "initial_h") + (("initial_c", "P") if op == "LSTM" else ())
    model, feeds = layer_model(op, 9, batch=4, direction="bidirectional", runtime=runtime)
    feeds["sequence_lens"] = np.array([9, 4, 0, 1], np.int32)  # a row of length 0 ends with zero state
    check(model, feeds)


def test_float64_layer():
    """onnxruntime has no float64 LSTM: onnx's reference implementation is the oracle."""
    model, feeds = layer_model("LSTM", 8, direction="bidirectional")
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    feeds = {k: v.astype(np.float64) for k, v in feeds.items()}
    check(model, feeds, oracle=lambda m, f: list(ReferenceEvaluator(m).run(None, f)))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_batch_first_layout(op):
    """onnxruntime refuses layout=1: onnx's reference implementation is the oracle."""
    runtime = ("X", "initial_h") + (("initial_c",) if op == "LSTM" else ())
    model, feeds = layer_model(op, 6, direction="bidirectional", runtime=runtime, layout=1)
    check(model, feeds, oracle=lambda m, f: list(ReferenceEvaluator(m).run(None, f)))


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset(linear_before_reset):
    check(*layer_model("GRU", 12, direction="bidirectional", linear_before_reset=linear_before_reset))


def test_lstm_peepholes_clip_and_input_forget():
    model, feeds = layer_model("LSTM", 12, runtime=("X", "P"), clip=0.7, input_forget=1)
    check(model, feeds)


@pytest.mark.parametrize("op,acts,alpha,beta", [
    ("RNN", ["Relu"], [], []),
    ("RNN", ["LeakyRelu"], [0.3], []),
    ("RNN", ["ThresholdedRelu"], [0.1], []),
    ("RNN", ["Elu"], [0.8], []),
    ("RNN", ["Softsign"], [], []),
    ("RNN", ["Softplus"], [], []),
    ("RNN", ["Affine"], [0.5], [0.1]),
    ("RNN", ["ScaledTanh"], [1.5], [0.7]),
    ("GRU", ["HardSigmoid", "Tanh"], [0.3], [0.4]),
    ("LSTM", ["HardSigmoid", "Softsign", "ScaledTanh"], [0.25, 1.2], [0.45, 0.9]),
])
def test_activations(op, acts, alpha, beta):
    attrs: dict[str, object] = {"activations": acts}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    check(*layer_model(op, 8, **attrs))


def test_reference_matches_onnxruntime():
    """The op's NumPy reference, which constant folding uses, agrees with onnxruntime."""
    model, feeds = layer_model("LSTM", 7, direction="bidirectional", runtime=("X", "sequence_lens", "P"),
                               clip=2.0)
    mod, params = from_onnx(model, constant_inputs=feeds)
    folded = fold_expr(infer_expr(bind_params(mod["main"], params).body))
    assert isinstance(folded, Tuple) and all(isinstance(f, Constant) for f in folded.fields)
    for out, e in zip(folded.fields, ort_run(model, feeds)):
        np.testing.assert_allclose(np.asarray(out.data), e, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ a small model
def tagger_model(seq: int, seed: int = 0) -> onnx.ModelProto:
    """A sequence tagger: bidirectional LSTM -> GRU -> per-step linear classifier."""
    rng = np.random.default_rng(seed)
    batch, width, h1, h2, classes = 2, 10, 16, 12, 5

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    inits = {"W1": w(2, 4 * h1, width), "R1": w(2, 4 * h1, h1), "B1": w(2, 8 * h1),
             "W2": w(1, 3 * h2, 2 * h1), "R2": w(1, 3 * h2, h2), "B2": w(1, 6 * h2),
             "Wc": w(h2, classes), "bc": w(classes), "shape1": np.array([seq, batch, 2 * h1], np.int64),
             "shape2": np.array([seq, batch, h2], np.int64)}
    nodes = [
        helper.make_node("LSTM", ["X", "W1", "R1", "B1"], ["y1"], hidden_size=h1, direction="bidirectional"),
        helper.make_node("Transpose", ["y1"], ["y1t"], perm=[0, 2, 1, 3]),  # [seq, batch, dirs, hidden]
        helper.make_node("Reshape", ["y1t", "shape1"], ["x2"]),
        helper.make_node("GRU", ["x2", "W2", "R2", "B2"], ["y2", "h2"], hidden_size=h2, linear_before_reset=1),
        helper.make_node("Reshape", ["y2", "shape2"], ["y2r"]),
        helper.make_node("MatMul", ["y2r", "Wc"], ["logits0"]),
        helper.make_node("Add", ["logits0", "bc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(nodes, "tagger", [helper.make_tensor_value_info("X", F, [seq, batch, width])],
                              [helper.make_tensor_value_info("probs", F, None),
                               helper.make_tensor_value_info("h2", F, None)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("executor", ["graph", "aot"])
def test_tagger_model_matches_onnxruntime(executor):
    x = np.random.default_rng(1).standard_normal((50, 2, 10)).astype(np.float32)
    check(tagger_model(50), {"X": x}, executor)


def _kernel_source(seq: int, target: str) -> str:
    mod, params = from_onnx(tagger_model(seq))
    lib = tessera.build(mod, target=target, params=params, executor="aot", mod_name="tagger")
    return "\n".join(f.text for f in lib.sources() if "_kernels" in f.name)


def _structure(source: str) -> str:
    """The code with numbers blanked and OpenMP left out (the input projection of a long
    sequence is enough work to share among threads; a short one is not)."""
    source = re.sub(r"#if defined\(_OPENMP\)\n.*?#endif\n\n", "", source, flags=re.S)
    source = re.sub(r"^\s*TS_PARALLEL_FOR\w*\n", "", source, flags=re.M)
    return re.sub(r"\d+", "0", source)


@pytest.mark.parametrize("target", ["c", "c -mcpu=cortex-m4"])  # input projected up front / per step
def test_code_does_not_grow_with_sequence_length(target):
    """The time loop is a loop: 10 and 200 steps give the same kernels, differing only in constants."""
    short, long = _kernel_source(10, target), _kernel_source(200, target)
    functions = lambda src: re.findall(r"^TS_EXPORT int32_t (\w+)\(", src, re.M)  # noqa: E731
    assert functions(short) == functions(long) and len(functions(short)) >= 2
    assert _structure(short) == _structure(long)
    assert len(long) < 1.05 * len(short)


# ------------------------------------------------------------ import
def test_outputs_share_one_call():
    """Y, Y_h and Y_c are fields of one layer call, not three copies of it."""
    mod, _ = from_onnx(layer_model("LSTM", 4)[0])
    fields = mod["main"].body.fields
    assert all(isinstance(f, TupleGetItem) for f in fields)
    calls = {id(f.tuple_value) for f in fields}
    assert len(calls) == 1 and isinstance(fields[0].tuple_value, Call) and fields[0].tuple_value.op is rec.lstm


def test_missing_outputs_are_optional():
    model, feeds = layer_model("LSTM", 5)
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("Y_c", F, None))
    model.graph.node[0].output[:] = ["", "", "Y_c"]
    check(model, feeds)


def test_sequence_length_out_of_range_fails_at_run_time():
    model, feeds = layer_model("GRU", 5, batch=2, runtime=("X", "sequence_lens"))
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    lib(feeds["X"], np.array([5, 0], np.int32))  # both ends of the range are valid
    for bad in ([6, 1], [2, -1]):
        with pytest.raises(KernelFailure, match="TS_ERROR_INDEX_OUT_OF_RANGE"):
            lib(feeds["X"], np.array(bad, np.int32))


def test_constant_sequence_length_out_of_range_is_refused_at_import():
    model, feeds = layer_model("RNN", 5, batch=2, runtime=("X", "sequence_lens"))
    with pytest.raises(InvalidValueError, match=r"sequence length 7 is out of range for 5 steps \(valid: 0..5\)"):
        from_onnx(model, constant_inputs={"sequence_lens": np.array([7, 1], np.int32)})


def test_hidden_size_defaults_to_the_weight_rows():
    """onnxruntime requires hidden_size: onnx's reference implementation is the oracle."""
    model, feeds = layer_model("GRU", 4)
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != "hidden_size"]
    del node.attribute[:]
    node.attribute.extend(kept)
    check(model, feeds, oracle=lambda m, f: list(ReferenceEvaluator(m).run(None, f)))


def test_weight_of_the_wrong_width_is_refused():
    model, _ = layer_model("LSTM", 4)
    w = next(i for i in model.graph.initializer if i.name == "W")
    w.CopyFrom(numpy_helper.from_array(np.zeros((1, 28, 6), np.float32), "W"))
    with pytest.raises(ConversionError, match=r"W has shape \[1, 28, 6\], expected \[dirs, gates\*hidden, 5\]"):
        from_onnx(model)


@pytest.mark.parametrize("attrs,message", [
    ({"direction": "sideways"}, "direction 'sideways' is not valid"),
    ({"activations": ["Tanh", "Tanh"]}, r"expected 1 functions"),
    ({"activations": ["Swish"]}, "unknown recurrent activation 'Swish'"),
])
def test_bad_attributes_are_refused(attrs, message):
    with pytest.raises(ConversionError, match=message):
        from_onnx(layer_model("RNN", 3, **attrs)[0])


# ------------------------------------------------------------ on a microcontroller
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_layer_on_cortex_m4(op):
    """AOT C of a bidirectional layer runs on an emulated Cortex-M4 (mps2-an386) and matches onnxruntime.

    There the input is projected step by step: no buffer of steps x gates,
    so the planned pool is smaller than on a host, which projects every step
    up front with the matmul kernel."""
    runtime = ("X", "sequence_lens", "initial_h") + (("initial_c",) if op == "LSTM" else ())
    model, feeds = layer_model(op, 20, batch=2, width=6, hidden=16, direction="bidirectional", runtime=runtime)
    expected = ort_run(model, feeds)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="c -mcpu=cortex-m4", params=params, executor="aot", mod_name="layer")
    outputs, run = lib.run_board("mps2-an386", [feeds[i.name] for i in model.graph.input])
    for a, e in zip(outputs, expected):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)
    host = tessera.build(mod, params=params, executor="aot", mod_name="layer")
    projection = 20 * 2 * 2 * GATES[op] * 16 * 4  # steps x dirs x batch x gate rows, float32
    # the host holds the projection; the board's whole pool is smaller than that one buffer
    assert lib.program.pool_size < projection <= host.program.pool_size
    assert 0 < run.sizes.arena < host.program.pool_size
