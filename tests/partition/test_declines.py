"""The partitioning passes note why each call they leave on the host was not taken."""

from __future__ import annotations

import pytest

from tessera import relay
from tessera.op import elemwise as ew
from tessera.op.annotation import on_target
from tessera.relay.dataflow_pattern import is_op, wildcard
from tessera.relay.pattern_table import PatternEntry
from tessera.target import KINDS, Target, TargetKind
from tessera.transform import InferType
from tessera.transform.declines import Declined, Refusal, declined
from tessera.transform.partition import partition_for

T = relay.TensorType((2, 3), "float32")


def only_small(call) -> bool:
    return call.checked_type.shape[0] < 2


def never(match) -> bool:
    return False


@pytest.fixture(scope="module")
def accel():
    kind = TargetKind.register("declineaccel", accelerator=True)
    kind.set_supported_ops({"add": True, "multiply": only_small})
    kind.set_pattern_table([PatternEntry("declineaccel.exp_neg", is_op("negative")(is_op("exp")(wildcard())), never)])
    yield Target("c -accelerators=declineaccel").accelerators[0]
    KINDS.remove("declineaccel")


def test_each_refusal_names_its_reason(accel):
    x = relay.Var("x", T)
    y = ew.negative(ew.exp(ew.multiply(x, x)))  # multiply refused by its rule; exp -> negative by the check
    y = ew.add(on_target(ew.add(y, y), "host"), ew.subtract(y, y))  # a pin; an op with no rule; a taken add
    mod = partition_for(InferType()(relay.IRModule.from_expr(relay.Function((x,), y))), accel)
    notes = declined(mod)
    assert all(isinstance(d, Declined) and d.target == "declineaccel" for d in notes)
    reasons = {(d.op, d.reason) for d in notes}
    assert reasons == {
        ("multiply", "declineaccel's rule only_small for multiply refused the call"),
        ("exp", "pattern declineaccel.exp_neg: its check never refused the match"),
        ("negative", "pattern declineaccel.exp_neg: its check never refused the match"),
        ("exp", "no pattern or operator rule of declineaccel takes exp"),
        ("negative", "no pattern or operator rule of declineaccel takes negative"),
        ("add", "pinned to the host"),
        ("subtract", "no pattern or operator rule of declineaccel takes subtract"),
    }
    assert {(d.op, d.kind) for d in notes if d.kind is not Refusal.NO_RULE} == {
        ("multiply", Refusal.RULE), ("exp", Refusal.CHECK), ("negative", Refusal.CHECK), ("add", Refusal.PINNED)}
    assert {d.signature for d in notes if d.op == "multiply"} == {"(2x3 float32, 2x3 float32)"}


def test_notes_survive_later_passes_and_are_kept_once(accel):
    x = relay.Var("x", T)
    mod = InferType()(relay.IRModule.from_expr(relay.Function((x,), ew.subtract(ew.subtract(x, x), x))))
    once = partition_for(mod, accel)
    twice = partition_for(once, accel)
    assert declined(twice) == declined(once) and len(declined(once)) == 1
