"""LowerPartitions / lower_partition: partition functions to PrimFuncs through tensor expressions."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay, te
from tessera.backend.lower_partition import LowerPartitions, Lowering, lower_partition
from tessera.backend.target_hooks import TARGET_ATTR
from tessera.codegen.c_host import build_c_module
from tessera.errors import CompileError
from tessera.op import elemwise as ew
from tessera.op.nn import matmul
from tessera.relay.dataflow_pattern import is_op, wildcard
from tessera.relay.expr import Function
from tessera.relay.pattern_table import PatternEntry
from tessera.target import KINDS, RELAY_TO_TIR, TAGS, TIR_TO_RUNTIME, Target, TargetKind, register_tag
from tessera.tir import stmt as S
from tessera.transform import InferType
from tessera.transform.partition import partition_for

MM = is_op("nn.matmul")(wildcard(), wildcard())
ADD = is_op("add")(MM, wildcard())
ENTRY = PatternEntry("lpaccel.matmul", (ADD | MM).optional(lambda p: is_op("nn.relu")(p)))
RULE_SAW: list = []


def _matmul_rule(m, args):
    """The anchor by a rule (a plain reduction here); the add and relu keep their ops' computes."""
    RULE_SAW.append((m[MM].checked_type.shape, m.get(ADD) is not None))
    a, b = args
    r = te.reduce_axis(a.shape[1], "r")
    return te.compute((a.shape[0], b.shape[1]), lambda i, j: te.sum(a[i, r.var] * b[r.var, j], r), "rule_mm")


@pytest.fixture(scope="module")
def lpaccel():
    (TargetKind.register("lpaccel", accelerator=True).set_pattern_table([ENTRY])
     .set_attr(RELAY_TO_TIR, LowerPartitions("lpaccel", [Lowering(ENTRY, MM, _matmul_rule)]))
     .set_attr(TIR_TO_RUNTIME, lambda mod, target: build_c_module(mod, target, prefix="lpaccel")))
    register_tag("lpaccel", "c -accelerators=lpaccel")
    yield Target("c -accelerators=lpaccel").accelerators[0]
    KINDS.remove("lpaccel")
    TAGS.remove("lpaccel")


def _model():
    x = relay.Var("x", relay.TensorType((3, 4), "float32"))
    w1 = relay.Var("w1", relay.TensorType((4, 5), "float32"))
    b = relay.Var("b", relay.TensorType((5,), "float32"))
    w2 = relay.Var("w2", relay.TensorType((5, 2), "float32"))
    h = ew.relu(ew.add(matmul.matmul(x, w1), b))
    return relay.IRModule.from_expr(relay.Function((x, w1, b, w2), matmul.matmul(h, w2)))


def test_partitions_become_primfuncs_marked_for_their_target(lpaccel):
    RULE_SAW.clear()
    lib = tessera.build(_model(), target="lpaccel")
    assert sorted(RULE_SAW) == [((3, 2), False), ((3, 5), True)]
    (kernel,) = [f for gv, f in lib.ir_mod.items() if isinstance(f, S.PrimFunc) and "lpaccel" in gv.name_hint]
    assert kernel.attrs[TARGET_ATTR] == lpaccel
    # the two composites are one partition: the first one's result is scratch the memory planner sees
    assert [b.shape for b in kernel.params[kernel.num_inputs + 1:]] == [(3, 5)]
    rng = np.random.default_rng(0)
    x, w1, b, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4, 5), (5,), (5, 2)))
    np.testing.assert_allclose(lib(x, w1, b, w2)[0], np.maximum(x @ w1 + b, 0) @ w2, rtol=1e-5, atol=1e-5)


def test_a_composite_without_a_lowering_is_named_with_the_known_ones(lpaccel):
    mod = partition_for(InferType()(_model()), lpaccel)
    (gv, func), = [(gv, f) for gv, f in mod.items() if isinstance(f, Function) and f.attrs.compiler]
    other = PatternEntry("lpaccel.other", MM)
    with pytest.raises(CompileError, match=r"no lowering for composite 'lpaccel.matmul'; known: lpaccel.other"):
        lower_partition(func, gv.name_hint, lpaccel, [Lowering(other, MM, _matmul_rule)])
