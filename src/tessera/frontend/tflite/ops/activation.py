"""RELU, RELU6, RELU_N1_TO_1, LOGISTIC, TANH and HARD_SWISH.

Float tensors use tessera's float ops. An int8 activation depends on its
input byte alone, so it becomes a 256-entry table computed here exactly as
LiteRT computes its int8 kernel, and one `take` at run time: bit-exact by
construction, and cheaper than the arithmetic on a microcontroller.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ....op import elemwise as ew
from ....op.qnn_rounding import multiply_ref, quantize_multiplier, round_half_away_ref
from ....op.transform_gather import take
from ....relay.expr import Constant, Expr
from ..importer import Operator, Value
from ..registry import converter

INT8_VALUES = np.arange(-128, 128, dtype=np.int64)
Table = Callable[[float, int, float, int], np.ndarray]  # (in scale, in zp, out scale, out zp) -> int8 (256,)


def _lookup(op: Operator, table: Table) -> Value:
    t_in, t_out = op.tensor(0), op.output()
    q_in, q_out = op.quantization(t_in), op.quantization(t_out)
    if t_in.dtype != "int8" or t_out.dtype != "int8" or q_in is None or q_out is None or \
            not (q_in.per_tensor and q_out.per_tensor):
        raise op.error(f"quantised {op.info.op_name} is supported for per-tensor int8 input and output, got "
                       f"{t_in.dtype} -> {t_out.dtype}")
    values = table(float(q_in.scale[0]), int(q_in.zero_point[0]), float(q_out.scale[0]), int(q_out.zero_point[0]))
    x = op.value(0)
    index = ew.add(ew.cast(x.expr, dtype="int32"), Constant(np.asarray(128, np.int32)))
    return Value(take(Constant(values.astype(np.int8)), index, axis=0), x.channels_first)


def _unary(op: Operator, float_fn: Callable[[Expr], Expr], table: Table) -> Value:
    if op.tensor(0).dtype == "float32":
        x = op.value(0)
        return Value(float_fn(x.expr), x.channels_first)
    return _lookup(op, table)


def _relu_table(lo: float, hi: float | None) -> Table:
    """LiteRT's QuantizedReluX: rescale by in/out scale (MultiplyByQuantizedMultiplier), then the bounds."""
    def table(s_in: float, z_in: int, s_out: float, z_out: int) -> np.ndarray:
        q, e = quantize_multiplier(float(np.float32(s_in) / np.float32(s_out)))
        y = z_out + multiply_ref(INT8_VALUES - z_in, np.int64(q), np.int64(max(e, 0)), np.int64(max(-e, 0)))
        low = max(-128, z_out + int(round_half_away_ref(np.float32(lo) / np.float32(s_out))))
        high = 127 if hi is None else min(127, z_out + int(round_half_away_ref(np.float32(hi) / np.float32(s_out))))
        return np.clip(y, low, high)

    return table


def _float_table(fn: Callable[[np.ndarray], np.ndarray]) -> Table:
    """LiteRT's LUTPopulate: dequantise, transform in float, round half away from zero, saturate."""
    def table(s_in: float, z_in: int, s_out: float, z_out: int) -> np.ndarray:
        x = np.float32(s_in) * (INT8_VALUES - z_in).astype(np.float32)
        y = fn(x.astype(np.float32)).astype(np.float32)
        rescaled = round_half_away_ref(y * (np.float32(1) / np.float32(s_out)))
        return np.clip(rescaled.astype(np.int64) + z_out, -128, 127)

    return table


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1) / (np.float32(1) + np.exp(-x))


@converter("RELU")
def relu(op: Operator) -> Value:
    return _unary(op, ew.relu, _relu_table(0.0, None))


@converter("RELU6")
def relu6(op: Operator) -> Value:
    return _unary(op, lambda x: ew.clip(x, a_min=0.0, a_max=6.0), _relu_table(0.0, 6.0))


@converter("RELU_N1_TO_1")
def relu_n1_to_1(op: Operator) -> Value:
    return _unary(op, lambda x: ew.clip(x, a_min=-1.0, a_max=1.0), _relu_table(-1.0, 1.0))


@converter("LOGISTIC")
def logistic(op: Operator) -> Value:
    return _unary(op, ew.sigmoid, _float_table(_sigmoid))


@converter("TANH")
def tanh(op: Operator) -> Value:
    return _unary(op, ew.tanh, _float_table(np.tanh))


@converter("HARD_SWISH")
def hard_swish(op: Operator) -> Value:
    from .hard_swish import hard_swish_table

    return _unary(op, ew.hard_swish, hard_swish_table)
