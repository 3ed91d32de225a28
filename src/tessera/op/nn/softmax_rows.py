"""Softmax along the last axis as one call of a row kernel, on hosts with AVX2 or AVX-512.

Written as TE stages, softmax is four passes over the whole tensor (row
maxima, exp into a buffer, row sums, a division), and each reduction is one
scalar chain: float addition may not be reassociated, so gcc keeps a sum or
a max sequential, one element per add's latency. `ts_softmax_rows_float32(rows,
n, x, y)` (C text in `tessera.codegen.c_rows`) takes each row once, while it
is in L1: the maximum and the sum in 16 partial lanes (vectorised), exp by
the polynomial `ts_exp_float32`, and rows split over OpenMP threads. Only
the order of the additions in a row's sum differs from the staged version.
"""

from __future__ import annotations

import math

from ... import te
from ...relay.ty import TensorType
from ...target.simd import float32_lanes
from ..schedule_context import ScheduleContext

SOFTMAX_ROWS = "ts_softmax_rows_float32"
MIN_LANES = 8  # AVX2 and up, as the GEMM microkernel: other targets keep the staged kernel (and their C)


def softmax_rows(x: te.Tensor, axis: int, out: TensorType, sched: ScheduleContext) -> te.Tensor | None:
    """Softmax of float32 `x` along its last axis as a row-kernel call, or None where the stages are kept."""
    if axis != x.ndim - 1 or x.dtype != "float32" or out.dtype != "float32":
        return None
    if (float32_lanes(sched.target) or 0) < MIN_LANES:
        return None
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    return te.extern(out.shape, [x], lambda ins, y: te.call_extern(
        SOFTMAX_ROWS, rows, n, te.pointer(ins[0]), te.pointer(y)), name="softmax")
