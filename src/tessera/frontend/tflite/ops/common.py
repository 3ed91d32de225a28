"""Helpers shared by the converters: fused activations and TensorFlow's SAME padding."""

from __future__ import annotations

import tflite

from ....op import elemwise as ew
from ....relay.expr import Expr
from ..importer import Operator

_FUSED = {
    tflite.ActivationFunctionType.NONE: None,
    tflite.ActivationFunctionType.RELU: (0.0, None),
    tflite.ActivationFunctionType.RELU6: (0.0, 6.0),
    tflite.ActivationFunctionType.RELU_N1_TO_1: (-1.0, 1.0),
}
_FUSED_NAMES = {v: k for k, v in vars(tflite.ActivationFunctionType).items() if isinstance(v, int)}


def fused_activation(op: Operator, y: Expr, code: int) -> Expr:
    """`y` through the operator's fused activation (RELU as relu, the others as clip)."""
    if code not in _FUSED:
        raise op.error(f"fused activation {_FUSED_NAMES.get(code, code)} is not supported "
                       "(NONE, RELU, RELU6 and RELU_N1_TO_1 are)")
    bounds = _FUSED[code]
    if bounds is None:
        return y
    lo, hi = bounds
    return ew.relu(y) if hi is None else ew.clip(y, a_min=lo, a_max=hi)


def padding(op: Operator, code: int, size: tuple[int, int], kernel: tuple[int, int], strides: tuple[int, int],
            dilation: tuple[int, int] = (1, 1)) -> tuple[int, int, int, int]:
    """(top, left, bottom, right): SAME puts the odd pixel at the end, VALID pads nothing."""
    if code == tflite.Padding.VALID:
        return (0, 0, 0, 0)
    if code != tflite.Padding.SAME:
        raise op.error(f"padding {code} is not valid (SAME = 0, VALID = 1)")
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilation):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return (begins[0], begins[1], ends[0], ends[1])
