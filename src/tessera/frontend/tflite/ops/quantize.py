"""QUANTIZE and DEQUANTIZE at a model's float boundaries."""

from __future__ import annotations

from ..importer import Operator, Value
from ..registry import converter


@converter("QUANTIZE")
def quantize(op: Operator) -> Value:
    t = op.tensor(0)
    if t.dtype not in ("float32", "int8"):
        raise op.error(f"{t.describe()} is {t.dtype}; tessera quantises float32 (or requantises int8)")
    return op.quantized(op.dequantized(0))


@converter("DEQUANTIZE")
def dequantize(op: Operator) -> Value:
    if op.output().dtype != "float32":
        raise op.error(f"{op.output().describe()} is {op.output().dtype}; tessera dequantises to float32")
    return op.dequantized(0)
