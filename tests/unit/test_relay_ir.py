"""Relay IR: printing, structural equality/hashing, modules, deep graphs."""

from __future__ import annotations


import numpy as np
import pytest

from tessera import relay
from tessera.errors import TesseraError, TypeInferenceError
from tessera.op import elemwise as ew
from tessera.op.nn import conv
from tessera.relay.structural import structural_equal, structural_hash
from tessera.transform import InferType


def _relu_add(c: float = 1.0) -> relay.Function:
    x = relay.Var("x", relay.TensorType((2, 3), "float32"))
    return relay.Function((x,), ew.relu(ew.add(x, relay.const(np.float32(c)))))


def test_printer_shows_bindings_with_types():
    mod = InferType()(relay.IRModule.from_expr(_relu_add()))
    text = str(mod)
    assert text.splitlines()[0] == "def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {"
    assert "%0 = add(%x, 1.0f) /* ty=Tensor[(2, 3), float32] */;" in text
    assert "nn.relu(%0) /* ty=Tensor[(2, 3), float32] */" in text


def test_printer_shows_attributes():
    x = relay.Var("x", relay.TensorType((1, 3, 8, 8), "float32"))
    w = relay.Var("w", relay.TensorType((4, 3, 3, 3), "float32"))
    f = relay.Function((x, w), conv.conv2d(x, w, strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1)))
    assert "strides=[2, 2], padding=[1, 1, 1, 1]" in str(relay.IRModule.from_expr(f))


def test_structural_equality_is_alpha_equivalence():
    a, b = _relu_add(), _relu_add()
    assert a is not b
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)
    c = _relu_add(2.0)
    assert not structural_equal(a, c)
    assert structural_hash(a) != structural_hash(c)


def test_free_variables_must_match_unless_mapped():
    x = relay.Var("x", relay.TensorType((2,), "float32"))
    y = relay.Var("x", relay.TensorType((2,), "float32"))
    assert not structural_equal(ew.exp(x), ew.exp(y))
    assert structural_equal(ew.exp(x), ew.exp(y), map_free_vars=True)
    assert structural_hash(ew.exp(x), map_free_vars=True) == structural_hash(ew.exp(y), map_free_vars=True)


def test_sharing_versus_duplication_is_distinguished_by_variables():
    x = relay.Var("x", relay.TensorType((2,), "float32"))
    shared = ew.exp(x)
    f1 = relay.Function((x,), ew.add(shared, shared))
    x2 = relay.Var("x", relay.TensorType((2,), "float32"))
    f2 = relay.Function((x2,), ew.add(ew.exp(x2), ew.exp(x2)))
    assert structural_equal(f1, f2)


def test_module_updates_are_functional():
    mod = relay.IRModule.from_expr(_relu_add())
    other = mod.with_function("helper", _relu_add(3.0))
    assert "helper" not in mod and "helper" in other
    with pytest.raises(TesseraError, match="no function named 'mian'.*did you mean 'main'"):
        mod["mian"]


def test_infer_type_names_the_failing_call():
    x = relay.Var("x", relay.TensorType((2, 3), "float32"))
    y = relay.Var("y", relay.TensorType((4, 3), "float32"))
    mod = relay.IRModule.from_expr(relay.Function((x, y), ew.add(x, y)))
    with pytest.raises(TypeInferenceError, match=r"add\(Tensor\[\(2, 3\), float32\], Tensor\[\(4, 3\), float32\]\).*cannot be broadcast"):
        InferType()(mod)


def test_infer_type_rejects_mixed_dtypes():
    x = relay.Var("x", relay.TensorType((2,), "float32"))
    y = relay.Var("y", relay.TensorType((2,), "int32"))
    with pytest.raises(TypeInferenceError, match="float32 and int32"):
        InferType()(relay.IRModule.from_expr(relay.Function((x, y), ew.multiply(x, y))))


def test_deep_graphs_do_not_hit_the_recursion_limit():
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    body = x
    for _ in range(5000):
        body = ew.relu(body)
    mod = InferType()(relay.IRModule.from_expr(relay.Function((x,), body)))
    assert str(mod.main.checked_type.ret_type) == "Tensor[(4,), float32]"
    assert structural_hash(mod.main) == structural_hash(mod.main)


def test_ops_reject_unknown_attributes():
    x = relay.Var("x", relay.TensorType((1, 3, 8, 8), "float32"))
    with pytest.raises(TesseraError, match="no attribute 'stride'.*did you mean 'strides'"):
        conv.conv2d(x, x, stride=(1, 1))
