"""pad: grow (or, with negative widths, crop) a tensor along each axis.

Modes follow ONNX Pad / numpy.pad: "constant" fills with the scalar second
input, "edge" repeats the border element, "reflect" mirrors without repeating
the border, "wrap" continues periodically. Negative widths crop first; the
positive widths then pad the cropped tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext

PadMode = Literal["constant", "edge", "reflect", "wrap"]
PAD_MODES: tuple[PadMode, ...] = get_args(PadMode)


@dataclass(frozen=True)
class PadAttrs:
    pad_width: tuple[tuple[int, int], ...]  # (before, after) per axis
    mode: str = "constant"  # one of PAD_MODES (checked by `pad_mode`: attrs come from keyword arguments)


def pad_mode(attrs: PadAttrs) -> PadMode:
    """The mode of `attrs`, checked."""
    for mode in PAD_MODES:
        if attrs.mode == mode:
            return mode
    raise TypeInferenceError(f"pad mode {attrs.mode!r} is not valid; expected one of {', '.join(PAD_MODES)}")


@dataclass(frozen=True)
class _AxisPlan:
    crop: int  # elements dropped at the start
    extent: int  # extent after cropping
    before: int  # elements added at the start
    grows: bool  # any element added on this axis


def _plans(x: TensorType, attrs: PadAttrs) -> list[_AxisPlan]:
    pad_mode(attrs)
    if len(attrs.pad_width) != x.ndim:
        raise TypeInferenceError(f"pad_width needs {x.ndim} (before, after) pairs, got {len(attrs.pad_width)}")
    plans = []
    for k, ((before, after), n) in enumerate(zip(attrs.pad_width, x.shape)):
        extent = n - max(-before, 0) - max(-after, 0)
        if extent < 0:
            raise TypeInferenceError(f"pads ({before}, {after}) crop more than the {n} elements of axis {k}")
        grows = before > 0 or after > 0
        if grows and attrs.mode != "constant" and extent == 0:
            raise TypeInferenceError(f"{attrs.mode} padding of axis {k} needs a non-empty axis")
        plans.append(_AxisPlan(max(-before, 0), extent, max(before, 0), grows))
    return plans


def _pad_type(types: tuple[Type, ...], attrs: PadAttrs) -> Type:
    x, value = as_tensor(types[0], "data"), as_tensor(types[1], "pad value")
    if value.size != 1 or value.dtype != x.dtype:
        raise TypeInferenceError(f"pad value must be one {x.dtype} element, got {value}")
    _plans(x, attrs)
    return TensorType(tuple(n + a + b for n, (a, b) in zip(x.shape, attrs.pad_width)), x.dtype)


def _pad_ref(args: list[np.ndarray], attrs: PadAttrs) -> np.ndarray:
    x, value = args
    plans = _plans(TensorType(x.shape, x.dtype.name), attrs)
    crop = tuple(slice(p.crop, p.crop + p.extent) for p in plans)
    widths = [(max(a, 0), max(b, 0)) for a, b in attrs.pad_width]
    x = x[crop]
    mode = pad_mode(attrs)
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value.reshape(()))
    return np.pad(x, widths, mode=mode)


# mode -> (position j in [-before, extent + after), extent) -> position in [0, extent)
def _reflect(j: E.PrimExpr, n: int) -> E.PrimExpr:
    if n == 1:
        return E.IntImm(0)
    period = 2 * (n - 1)
    m = E.floormod(j, period)
    return E.select(E.lt(m, n), m, E.sub(period, m))


_SOURCE: dict[str, Callable[[E.PrimExpr, int], E.PrimExpr]] = {
    "edge": lambda j, n: E.minimum(E.maximum(j, 0), n - 1),
    "wrap": lambda j, n: E.floormod(j, n),
    "reflect": _reflect,
}


def _pad_compute(inputs: list[te.Tensor], attrs: PadAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x, value = inputs
    plans = _plans(TensorType(x.shape, x.dtype), attrs)
    fill = value[(0,) * value.ndim]
    if any(p.extent == 0 for p in plans):  # nothing to read: all padding
        return te.compute(out.shape, lambda *i: fill, name="pad")

    def element(*i: E.Var) -> E.PrimExpr:
        src: list[E.PrimExpr] = []
        inside: E.PrimExpr = E.IntImm(1, "bool")
        for v, p in zip(i, plans):
            j = E.sub(v, p.before)
            if not p.grows:
                pass  # only cropped (or untouched): j is in range
            elif attrs.mode == "constant":
                inside = E.logical_and(inside, E.logical_and(E.ge(j, 0), E.lt(j, p.extent)))
                j = E.minimum(E.maximum(j, 0), p.extent - 1)  # keep the unused read in bounds
            else:
                j = _SOURCE[attrs.mode](j, p.extent)
            src.append(E.add(j, p.crop))
        read = x[tuple(src)]
        return read if attrs.mode != "constant" else E.select(inside, read, fill)

    return te.compute(out.shape, element, name="pad")


pad = register_op(
    "pad", type_rel=_pad_type, reference=_pad_ref, pattern=OpPattern.INJECTIVE,
    compute=_pad_compute, attrs=PadAttrs, num_inputs=2,
    doc="pad(data, value, pad_width=((before, after), ...), mode=...)",
)
