"""ONNX Einsum: the equation parser, the lowering to transposes, reshapes,
sums, gathers and matmuls, and compiled results against NumPy's einsum."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tessera.errors import ConversionError
from tessera.frontend.onnx import from_onnx
from tessera.frontend.onnx.backend import TesseraBackend
from tessera.frontend.onnx.ops.einsum import parse_equation
from tessera.relay.expr import Call
from tessera.relay.visitor import post_order

RNG = np.random.default_rng(7)


def einsum_model(equation: str, inputs: list[np.ndarray], opset: int = 12):
    names = [f"x{k}" for k in range(len(inputs))]
    node = helper.make_node("Einsum", names, ["y"], name="attn_scores", equation=equation)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("equation,shapes", [
    ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 5)]),  # attention-weighted values
    ("bid,jd->bij", [(2, 4, 5), (3, 5)]),  # projection against a weight
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),  # ellipsis, broadcast batch dims
    ("ab...,bc...->ac...", [(3, 4, 2), (4, 5, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),  # bilinear
    ("i,j->ij", [(3,), (4,)]),  # outer product
    ("i,i", [(5,)] * 2),  # implicit output: inner product
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit output: matmul
    ("ba,ca", [(2, 3), (4, 3)]),  # implicit output in alphabetical order: bc
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),  # diagonal
    ("ii", [(4, 4)]),  # trace
    ("...ii->...i", [(3, 5, 5)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("bij->jbi", [(2, 3, 4)]),
    ("iii->i", [(3, 3, 3)]),
])
def test_einsum_matches_numpy(equation: str, shapes: list[tuple[int, ...]]) -> None:
    inputs = [randn(*s) for s in shapes]
    (out,) = TesseraBackend.prepare(einsum_model(equation, inputs)).run(inputs)
    ref = np.einsum(equation, *inputs)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_einsum_integer_is_exact() -> None:
    inputs = [RNG.integers(-50, 50, (3, 4)).astype("int32"), RNG.integers(-50, 50, (4, 2)).astype("int32")]
    (out,) = TesseraBackend.prepare(einsum_model("ij,jk->ki", inputs)).run(inputs)
    np.testing.assert_array_equal(out, np.einsum("ij,jk->ki", *inputs))


def _ops(equation: str, shapes: list[tuple[int, ...]]) -> list[str]:
    inputs = [randn(*s) for s in shapes]
    mod, _ = from_onnx(einsum_model(equation, inputs))
    return [e.op.name for e in post_order(mod["main"].body) if isinstance(e, Call)]


def test_attention_equations_are_one_batched_matmul() -> None:
    # batch dims stay separate: no reshape, just the transposed keys
    assert _ops("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]) == ["transpose", "nn.matmul"]
    assert _ops("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 5)]) == ["nn.matmul"]
    assert _ops("bid,jd->bij", [(2, 4, 5), (3, 5)]) == ["reshape", "transpose", "nn.matmul", "reshape"]


def test_parse_equation_expands_ellipsis_right_aligned() -> None:
    eq = parse_equation("...ij,...jk->...ik", [4, 3])
    assert eq.inputs == (("...0", "...1", "i", "j"), ("...1", "j", "k"))
    assert eq.output == ("...0", "...1", "i", "k")
    assert parse_equation("... ii -> ...i", [2]).output == ("i",)  # an empty ellipsis, spaces allowed


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk->iz", [(2, 3), (3, 4)], r"output labels \['z'\] appear in no input"),
    ("ij->ii", [(2, 2)], "output 'ii' repeats a label"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has sizes 3 and 4"),
    ("ijk->i", [(2, 3)], "term 0 has 3 labels for an input of rank 2"),
    ("ij,jk", [(2, 3)], "it has 2 input terms, the node has 1 inputs"),
    ("i1->i", [(2, 3)], "term 'i1' has '1'"),
    ("ij->i", [(2, 3), (3,)], "it has 1 input terms, the node has 2 inputs"),
])
def test_einsum_errors_name_node_and_equation(equation: str, shapes: list, message: str) -> None:
    inputs = [randn(*s) for s in shapes]
    with pytest.raises(ConversionError, match=rf"node 'attn_scores' \(Einsum.*equation '{equation}'.*{message}"):
        from_onnx(einsum_model(equation, inputs))


def test_einsum_attention_block_matches_onnxruntime() -> None:
    from tessera.testing.models import ort_run

    q, k, v = (randn(2, 3, 5, 4) for _ in range(3))
    nodes = [helper.make_node("Einsum", ["q", "k"], ["scores"], equation="bhid,bhjd->bhij"),
             helper.make_node("Softmax", ["scores"], ["weights"], axis=-1),
             helper.make_node("Einsum", ["weights", "v"], ["y"], equation="bhij,bhjd->bhid")]
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 5, 4]) for n in "qkv"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (ours,) = TesseraBackend.prepare(model).run([q, k, v])
    (expected,) = ort_run(model, {"q": q, "k": k, "v": v})
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)
