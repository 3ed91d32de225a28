"""Graph passes, checked with before/after IR and numerics."""

from __future__ import annotations

import numpy as np

import tessera
from tessera import relay
from tessera.op import elemwise as ew
from tessera.op import transform as tf
from tessera.op.nn import conv, matmul, norm
from tessera.relay.expr import Call, Constant, Function, Let
from tessera.relay.structural import structural_equal
from tessera.relay.visitor import post_order
from tessera.transform import (
    DeadCodeElimination, FoldConstant, FuseOps, InferType, PassContext, PassTimingInstrument,
    PrintIRInstrument, Sequential, SimplifyInference,
)


def _mod(params, body):
    return InferType()(relay.IRModule.from_expr(relay.Function(params, body)))


def test_fold_constant_before_after():
    x = relay.Var("x", relay.TensorType((2,), "float32"))
    c = ew.add(relay.const(np.ones(2, np.float32)), relay.const(np.full(2, 2, np.float32)))
    before = _mod((x,), ew.multiply(x, ew.exp(c)))
    after = FoldConstant()(before)
    x2 = relay.Var("x", relay.TensorType((2,), "float32"))
    expected = _mod((x2,), ew.multiply(x2, relay.const(np.exp(np.full(2, 3, np.float32)))))
    assert structural_equal(after.main, expected.main)


def test_simplify_inference_folds_batch_norm_into_conv_weights():
    rng = np.random.default_rng(0)
    x = relay.Var("x", relay.TensorType((1, 3, 6, 6), "float32"))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    stats = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
    y = norm.batch_norm(conv.conv2d(x, relay.const(w), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)),
                        *(relay.const(s) for s in stats))
    mod = _mod((x,), y)
    simplified = FoldConstant()(SimplifyInference()(mod))
    ops = [n.op.name for n in post_order(simplified.main) if isinstance(n, Call)]
    assert ops == ["nn.conv2d", "add"]  # the multiply went into the weights
    xv = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(tessera.build(simplified)(xv)[0], tessera.build(mod)(xv)[0], rtol=1e-5, atol=1e-5)


def _fused_groups(mod):
    fused = FuseOps()(mod)
    return [
        [n.op.name for n in post_order(f.body) if isinstance(n, Call)]
        for f in post_order(fused.main) if isinstance(f, Function) and f.attrs.primitive
    ]


def test_fuse_ops_gives_conv_an_epilogue_and_keeps_injective_apart():
    x = relay.Var("x", relay.TensorType((1, 3, 8, 8), "float32"))
    w = relay.Var("w", relay.TensorType((4, 3, 3, 3), "float32"))
    b = relay.Var("b", relay.TensorType((4, 1, 1), "float32"))
    y = ew.relu(ew.add(conv.conv2d(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)), b))
    d = relay.Var("d", relay.TensorType((256, 10), "float32"))
    out = matmul.matmul(tf.reshape(y, newshape=(1, 256)), d)
    groups = _fused_groups(_mod((x, w, b, d), out))
    assert sorted(groups) == [["nn.conv2d", "add", "nn.relu"], ["nn.matmul"], ["reshape"]]


def test_fuse_ops_does_not_fuse_a_value_with_two_consumers():
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    e = ew.exp(x)
    groups = _fused_groups(_mod((x,), ew.add(ew.relu(e), ew.negative(e))))
    # exp has two readers, so it ends its own kernel; the add joins one producer
    assert sorted(groups) == [["exp"], ["negative"], ["nn.relu", "add"]]


def test_fuse_ops_at_opt_level_0_keeps_one_kernel_per_op():
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    mod = _mod((x,), ew.relu(ew.exp(x)))
    with PassContext(opt_level=0) as ctx:
        fused = FuseOps()(mod, ctx)
    prims = [f for f in post_order(fused.main) if isinstance(f, Function) and f.attrs.primitive]
    assert len(prims) == 2


def test_dead_code_elimination_drops_unused_lets_and_functions():
    x = relay.Var("x", relay.TensorType((2,), "float32"))
    unused = relay.Var("unused", relay.TensorType((2,), "float32"))
    mod = relay.IRModule.from_expr(relay.Function((x,), Let(unused, ew.exp(x), ew.relu(x))))
    mod = mod.with_function("orphan", relay.Function((x,), x))
    out = DeadCodeElimination()(mod)
    assert "orphan" not in out
    assert not any(isinstance(n, Let) for n in post_order(out.main))


def test_pass_context_opt_level_and_instruments(capsys):
    x = relay.Var("x", relay.TensorType((2,), "float32"))
    mod = _mod((x,), ew.add(x, ew.add(relay.const(np.ones(2, np.float32)), relay.const(np.ones(2, np.float32)))))
    timing = PassTimingInstrument()
    with PassContext(opt_level=0, instruments=[timing]) as ctx:
        same = Sequential([FoldConstant()])(mod, ctx)  # FoldConstant needs opt level 1
    assert same is mod
    with PassContext(opt_level=2, instruments=[timing, PrintIRInstrument(["FoldConstant"])]) as ctx:
        folded = Sequential([FoldConstant()])(mod, ctx)
    assert [type(n) for n in post_order(folded.main) if isinstance(n, Constant)]
    assert "// after FoldConstant" in capsys.readouterr().out
    assert "FoldConstant" in timing.summary()


def test_hand_written_affine_after_conv_folds_into_its_weights():
    # conv -> add(b) -> multiply(s) -> add(t), as Inception v2 and DenseNet write batch norm out
    rng = np.random.default_rng(2)
    x = relay.Var("x", relay.TensorType((1, 3, 6, 6), "float32"))
    w = relay.const(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b, s, t = (relay.const(rng.standard_normal((4, 1, 1)).astype(np.float32)) for _ in range(3))
    y = ew.add(ew.multiply(ew.add(conv.conv2d(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)), b), s), t)
    mod = _mod((x,), y)
    simplified = FoldConstant()(SimplifyInference()(mod))
    ops = [n.op.name for n in post_order(simplified.main) if isinstance(n, Call)]
    assert ops == ["nn.conv2d", "add"]
    xv = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(tessera.build(simplified)(xv)[0], tessera.build(mod)(xv)[0], rtol=1e-5, atol=1e-5)


def test_did_you_mean_keeps_part_of_what_was_typed():
    from tessera.errors import did_you_mean

    assert did_you_mean("c", ["a", "b"]) == ""  # a one-letter name is not a misspelling of another
    assert did_you_mean("blsa", ["blas", "c"]) == " (did you mean 'blas'?)"
    assert did_you_mean("ab", ["ac"]) == " (did you mean 'ac'?)"
