"""``qnn.mul``: LiteRT's int8 MUL, made by `transform.quantize_to_integer` from a TFLite model's
dequantize -> multiply -> quantize (``Rounding.TFLITE``).

``y = MultiplyByQuantizedMultiplier((a - za) * (b - zb), q, e) + zo``, saturated
to int8 and then to a fused activation's bounds; ``(q, e)`` come from
``input_scale_a * input_scale_b / output_scale`` (`op.qnn_rounding`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor
from .qnn import INT8, Requant, clamp_int8
from .qnn_rounding import multiply_expr, multiply_ref
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


@dataclass(frozen=True)
class QMulAttrs:
    a_zero_point: int
    b_zero_point: int
    multiplier: tuple[int, int]  # (Q31 multiplier, exponent)
    requant: Requant


def _type(types: tuple[Type, ...], attrs: QMulAttrs) -> Type:
    a, b = (as_tensor(t) for t in types)
    if a.dtype != "int8" or b.dtype != "int8" or a.shape != b.shape:
        raise TypeInferenceError(f"qnn.mul needs two int8 tensors of one shape, got {a} and {b}")
    return a


def _shifts(attrs: QMulAttrs) -> tuple[int, int, int]:
    q, e = attrs.multiplier
    return q, max(e, 0), max(-e, 0)


def _ref(args: list[np.ndarray], attrs: QMulAttrs) -> np.ndarray:
    a, b = (v.astype(np.int64) for v in args)
    q, left, right = _shifts(attrs)
    r = attrs.requant
    y = multiply_ref((a - attrs.a_zero_point) * (b - attrs.b_zero_point), q, left, right) + r.output_zero_point
    return np.clip(np.clip(y, *INT8), r.lo, r.hi).astype(np.int8)


def _compute(inputs: list[te.Tensor], attrs: QMulAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    a, b = inputs
    q, left, right = _shifts(attrs)
    r = attrs.requant

    def element(*i: E.Var) -> E.PrimExpr:
        da = E.sub(E.cast(a[i], "int32"), E.const(attrs.a_zero_point, "int32"))
        db = E.sub(E.cast(b[i], "int32"), E.const(attrs.b_zero_point, "int32"))
        y = multiply_expr(E.mul(da, db), E.const(q, "int32"), E.const(left, "int32"), E.const(right, "int32"))
        return clamp_int8(E.add(y, E.const(r.output_zero_point, "int32")), r)

    return te.compute(out.shape, element, name="qmul")


qmul = register_op(
    "qnn.mul", type_rel=_type, reference=_ref, pattern=OpPattern.ELEMWISE, compute=_compute, attrs=QMulAttrs,
    num_inputs=2, doc="int8 x int8 element-wise product with LiteRT's requantisation (TFLite MUL).",
)
