"""cumsum: running sums along an axis.

Each output element is a reduction over its axis with the elements outside
the prefix (or suffix) masked to zero: O(n^2) per line, but the terms are
added in the same order as a sequential scan, so float results round like
NumPy's cumsum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor, normalize_axis
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext


@dataclass(frozen=True)
class CumsumAttrs:
    axis: int = 0
    exclusive: bool = False  # leave out the element itself
    reverse: bool = False  # sum from the end


def _cumsum_type(types: tuple[Type, ...], attrs: CumsumAttrs) -> Type:
    x = as_tensor(types[0])
    if dt.is_bool(x.dtype):
        raise TypeInferenceError("cumsum needs a numeric dtype, got bool")
    if x.ndim == 0:
        raise TypeInferenceError("cumsum needs a tensor of rank >= 1, got a scalar")
    normalize_axis(attrs.axis, x.ndim)
    return x


def _shift_by_one(a: np.ndarray, axis: int) -> np.ndarray:
    """a moved one step along `axis`, zero first: inclusive -> exclusive sums."""
    out = np.zeros_like(a)
    src, dst = [slice(None)] * a.ndim, [slice(None)] * a.ndim
    src[axis], dst[axis] = slice(0, -1), slice(1, None)
    out[tuple(dst)] = a[tuple(src)]
    return out


def _cumsum_ref(args: list[np.ndarray], attrs: CumsumAttrs) -> np.ndarray:
    x = args[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    if attrs.reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if attrs.exclusive:
        out = _shift_by_one(out, axis)
    if attrs.reverse:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out)


def _cumsum_compute(inputs: list[te.Tensor], attrs: CumsumAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    n = x.shape[axis]
    r = te.reduce_axis(n, "k")
    k = E.sub(n - 1, r.var) if attrs.reverse else r.var  # the order the scan visits elements

    def element(*i: E.Var) -> te.Reduce:
        before, at = (E.gt, E.ge) if attrs.reverse else (E.lt, E.le)
        included = (before if attrs.exclusive else at)(k, i[axis])
        read = x[i[:axis] + (k,) + i[axis + 1:]]
        return te.sum(E.select(included, read, E.const(0, x.dtype)), r)

    return te.compute(out.shape, element, name="cumsum")


cumsum = register_op(
    "cumsum", type_rel=_cumsum_type, reference=_cumsum_ref, pattern=OpPattern.COMM_REDUCE,
    compute=_cumsum_compute, attrs=CumsumAttrs, num_inputs=1,
)
