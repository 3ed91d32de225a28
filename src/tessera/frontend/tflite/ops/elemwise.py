"""ADD and MUL (with broadcasting and fused activations)."""

from __future__ import annotations

from collections.abc import Callable

from ....op import elemwise as ew
from ....relay.expr import Expr
from ..importer import Operator, Value
from ..registry import converter
from .common import fused_activation


def aligned(op: Operator, ks: tuple[int, ...]) -> list[Value]:
    """The dequantised inputs `ks` in one layout: channels first only if all are 4-d and held so."""
    first = all(op.value(k).channels_first for k in ks)
    return [op.dequantized(k, channels_first=first) for k in ks]


def _binary(op: Operator, fn: Callable[[Expr, Expr], Expr]) -> Value:
    a, b = aligned(op, (0, 1))
    y = fused_activation(op, fn(a.expr, b.expr), int(op.options.FusedActivationFunction()))
    return op.quantized(Value(y, a.channels_first))


@converter("ADD")
def add(op: Operator) -> Value:
    return _binary(op, ew.add)


@converter("MUL")
def mul(op: Operator) -> Value:
    return _binary(op, ew.multiply)
