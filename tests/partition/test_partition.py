"""Partitioning for accelerators: patterns, regions, cycles, tuples, pins."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import relay
from tessera.errors import TesseraError
from tessera.op import elemwise as ew
from tessera.op.annotation import on_target
from tessera.op.nn import conv, matmul
from tessera.relay.dataflow_pattern import is_constant, is_op, wildcard
from tessera.relay.expr import Call, Function, GlobalVar, Tuple
from tessera.relay.visitor import post_order
from tessera.target import KINDS, Target, TargetKind
from tessera.transform import InferType
from tessera.relay.pattern_table import PatternEntry
from tessera.transform.merge_composite import MergeComposite
from tessera.transform.partition import partition_for

T = relay.TensorType((2, 3), "float32")


@pytest.fixture(scope="module")
def accel():
    kind = TargetKind.register("testaccel", accelerator=True)
    kind.set_supported_ops({"add": True, "nn.relu": True, "exp": True, "multiply": True})
    yield Target("c -accelerators=testaccel").accelerators[0]
    KINDS.remove("testaccel")


def _mod(params, body):
    return InferType()(relay.IRModule.from_expr(relay.Function(params, body)))


def _partitions(mod):
    return {gv.name_hint: f for gv, f in mod.items() if isinstance(f, Function) and f.attrs.compiler}


def _ops(f):
    return [n.op.name for n in post_order(f.body) if isinstance(n, Call) and not isinstance(n.op, (Function, GlobalVar))]


def test_adjacent_supported_calls_become_one_function(accel):
    x = relay.Var("x", T)
    mod = partition_for(_mod((x,), ew.negative(ew.relu(ew.add(x, x)))), accel)
    parts = _partitions(mod)
    assert list(parts) == ["tsgen_testaccel_0"]
    (f,) = parts.values()
    assert _ops(f) == ["add", "nn.relu"]
    assert f.attrs.global_symbol == "tsgen_testaccel_0" and f.attrs.target == accel
    calls = [n for n in post_order(mod.main) if isinstance(n, Call) and isinstance(n.op, GlobalVar)]
    assert [c.op.name_hint for c in calls] == ["tsgen_testaccel_0"]


def test_merging_that_would_create_a_cycle_is_refused(accel):
    # a = add(x, x) -> host negative(a) -> b = add(a, negative(a)): {a, b} would feed and read the host node
    x = relay.Var("x", T)
    a = ew.add(x, x)
    b = ew.add(a, ew.negative(a))
    mod = partition_for(_mod((x,), b), accel)
    parts = _partitions(mod)
    assert len(parts) == 2
    assert all(_ops(f) == ["add"] for f in parts.values())
    InferType()(mod)  # still a DAG that type-checks


def test_region_with_several_outputs_returns_a_tuple(accel):
    x = relay.Var("x", T)
    a = ew.exp(x)
    b = ew.relu(a)
    out = Tuple((ew.negative(a), ew.negative(b)))
    mod = partition_for(_mod((x,), out), accel)
    (f,) = _partitions(mod).values()
    assert isinstance(f.body, Tuple) and len(f.body.fields) == 2
    reads = [n for n in post_order(mod.main) if isinstance(n, relay.TupleGetItem)]
    assert sorted(r.index for r in reads) == [0, 1]


def test_tuples_on_the_host_side_feed_a_region(accel):
    x = relay.Var("x", T)
    pair = Tuple((ew.negative(x), x))
    first = relay.TupleGetItem(pair, 0)
    out = Tuple((ew.relu(ew.add(first, relay.TupleGetItem(pair, 1))), pair))
    mod = partition_for(_mod((x,), out), accel)
    (f,) = _partitions(mod).values()
    assert _ops(f) == ["add", "nn.relu"] and len(f.params) == 2


def test_pinned_call_sites_override_the_automatic_choice(accel):
    x = relay.Var("x", T)
    kept = on_target(ew.add(x, x), "host")
    mod = partition_for(_mod((x,), ew.relu(kept)), accel)
    (f,) = _partitions(mod).values()
    assert _ops(f) == ["nn.relu"]
    y = relay.Var("y", T)
    with pytest.raises(TesseraError, match="pinned to target 'testaccel', which does not support it"):
        partition_for(_mod((y,), on_target(ew.negative(y), "testaccel")), accel)


def test_merge_composite_wraps_matches_and_keeps_constants(accel):
    x = relay.Var("x", relay.TensorType((1, 3, 6, 6), "float32"))
    w = relay.const(np.ones((4, 3, 3, 3), np.float32))
    b = relay.const(np.ones((4, 1, 1), np.float32))
    c = conv.conv2d(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    y = ew.relu(ew.add(c, b))
    pattern = is_op("add")(is_op("nn.conv2d")(wildcard(), is_constant()), is_constant()) \
        .optional(lambda p: is_op("nn.relu")(p))
    mod = MergeComposite([PatternEntry("testaccel.conv_bias_relu", pattern)])(_mod((x,), y))
    (comp,) = [n for n in post_order(mod.main) if isinstance(n, Function) and n.attrs.composite]
    assert comp.attrs.composite == "testaccel.conv_bias_relu" and len(comp.params) == 1
    assert _ops(comp) == ["nn.conv2d", "add", "nn.relu"]


def test_merge_composite_skips_matches_whose_inside_escapes(accel):
    x = relay.Var("x", relay.TensorType((2, 4), "float32"))
    w = relay.const(np.ones((4, 4), np.float32))
    mm = matmul.matmul(x, w)
    y = Tuple((ew.relu(mm), mm))  # mm is also used outside the would-be composite
    mod = MergeComposite([PatternEntry("testaccel.mm_relu", is_op("nn.relu")(is_op("nn.matmul")(wildcard(), is_constant())))])(_mod((x,), y))
    assert not [n for n in post_order(mod.main) if isinstance(n, Function) and n.attrs.composite]


def test_composite_calls_are_offered_by_pattern_name():
    kind = TargetKind.register("testcomp", accelerator=True)
    try:
        pattern = is_op("nn.relu")(is_op("add")(wildcard(), wildcard()))
        kind.set_pattern_table([PatternEntry("testcomp.add_relu", pattern)])
        target = Target("c -accelerators=testcomp").accelerators[0]
        x = relay.Var("x", T)
        mod = partition_for(_mod((x,), ew.negative(ew.relu(ew.add(x, x)))), target)
        (f,) = _partitions(mod).values()
        (comp,) = [n for n in post_order(f) if isinstance(n, Function) and n.attrs.composite]
        assert comp.attrs.composite == "testcomp.add_relu"
    finally:
        KINDS.remove("testcomp")


def test_a_check_gets_the_match_with_typed_nodes_by_pattern_piece(accel):
    x = relay.Var("x", relay.TensorType((2, 4), "float32"))
    y = ew.relu(matmul.matmul(x, relay.const(np.ones((4, 3), np.float32))))
    mm = is_op("nn.matmul")(wildcard(), is_constant())
    relu = is_op("nn.relu")(mm)
    seen = []

    def check(m):
        seen.append((m[mm].checked_type.shape, m[relu].op.name, m.get(is_op("add")(mm, wildcard()))))
        return m[mm].checked_type.shape[1] > 3  # refuse: 3 columns

    mod = MergeComposite([PatternEntry("testaccel.mm_relu", relu, check)])(_mod((x,), y))
    assert seen == [((2, 3), "nn.relu", None)]
    assert not [n for n in post_order(mod.main) if isinstance(n, Function) and n.attrs.composite]
