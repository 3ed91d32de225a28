"""Average pools of one window per channel over a contiguous run of float32 (a global pool written as
AveragePool, KWS's 24 x 5 window) as one row-kernel call.

Written as a TE reduction, each output is one scalar chain of additions:
float addition may not be reassociated, so gcc keeps the sum sequential,
one element per add's latency (KWS's 64 windows of 120 values took 3.7 µs,
about a nanosecond an element). `ts_row_means_float32(rows, n, stride, x,
y)` (C text in `tessera.codegen.c_rows`) sets y[i] to the mean of the n
values from x + i * stride in 16 partial sums, which gcc vectorises. Only
the order of the additions differs from the staged version. Hosts with
AVX2 or AVX-512 only, like the other row kernels: elsewhere the stages stay.
(`mean` itself keeps its stages, which keep partial sums too and take in
their producer, such as LayerNorm's square: op/reduce.py.)
"""

from __future__ import annotations

import math

from .. import te
from ..target.simd import float32_lanes
from .schedule_context import ScheduleContext

ROW_MEANS = "ts_row_means_float32"
MIN_LANES = 8  # AVX2 and up


def row_means(x: te.Tensor, rows: int, n: int, stride: int, out_shape: tuple[int, ...],
              sched: ScheduleContext) -> te.Tensor | None:
    """`out_shape` (rows elements) holding the means of `x`'s runs of n elements, run i starting at i * stride,
    or None where the staged reduction is kept (not float32, a target without AVX2)."""
    if x.dtype != "float32" or (float32_lanes(sched.target) or 0) < MIN_LANES or n < 1:
        return None
    if math.prod(out_shape) != rows or (rows - 1) * stride + n > math.prod(x.shape):
        raise ValueError(f"{rows} runs of {n} at stride {stride} do not fit {x.shape} into {out_shape}")
    return te.extern(out_shape, [x], lambda ins, y: te.call_extern(
        ROW_MEANS, rows, n, stride, te.pointer(ins[0]), te.pointer(y)), name="row_means")
