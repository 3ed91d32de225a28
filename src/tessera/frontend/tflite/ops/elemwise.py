"""ADD and MUL (with broadcasting and fused activations)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ....op import elemwise as ew
from ....relay.expr import Constant, Expr
from ..importer import TO_NCHW, Operator, Value
from ..registry import converter
from .common import fused_activation


def aligned(op: Operator, ks: tuple[int, ...]) -> list[Value]:
    """The dequantised inputs `ks` in one layout: channels first when every input is held so, or is a
    constant (a per-channel scale of a squeeze-excitation, say), which is transposed here for free."""
    held = [op.value(k) for k in ks]

    def movable(k: int, v: Value) -> bool:  # a constant whose quantisation axis (if any) survives the move
        q = op.quantization(op.tensor(k))
        return isinstance(v.expr, Constant) and (v.expr.data.ndim == 4 or (
            v.expr.data.ndim < 4 and (q is None or q.per_tensor)))

    first = any(v.channels_first for v in held) and all(v.channels_first or movable(k, v) for k, v in zip(ks, held))
    if not first:
        return [op.dequantized(k, channels_first=False) for k in ks]
    values = []
    for k, v in zip(ks, held):
        if not v.channels_first:
            assert isinstance(v.expr, Constant)  # (`movable`)
            data = v.expr.data
            nhwc_data = data.reshape((1,) * (4 - data.ndim) + data.shape)
            op.replace_input(k, Value(Constant(np.ascontiguousarray(nhwc_data.transpose(TO_NCHW))), True))
        values.append(op.dequantized(k, channels_first=True))
    return values


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
