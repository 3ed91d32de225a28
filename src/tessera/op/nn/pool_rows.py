"""2-d float32 max pooling as one call of a row kernel, on hosts with AVX2 or AVX-512.

The staged window reduction walks each output's window one element at a
time, and a strided or padded one also clamps every index and selects
against the border: ResNet-50's 3x3 stride-2 pool over 64 x 112 x 112 took
about 1 ms at one thread on Zen 4, onnxruntime 0.1 ms; ShuffleNet's over 24
channels 0.5 ms against 0.09 ms. `ts_max_pool2d_float32` (C text in
`tessera.codegen.c_pool`) takes each output row in two vectorisable
passes: the maximum of the window's input rows into a row buffer, then the
maximum across each window's columns, the window clipped to the input (the
padding is -inf, so clipping it is exact). Only where a NaN meets another
NaN or value may the result differ from the staged order of comparisons.
Unpadded pools keep the stages: without border selects gcc compiles their
constant-bound loops well (SqueezeNet's three 3x3 stride-2 pools took
0.3-0.8x this kernel's time). So do stride-1 pools, whose stages pad the
input in scratch and vectorise along the output row (Inception-v1's took
0.75-0.9x this kernel's time), other targets, dtypes and dilated windows.
"""

from __future__ import annotations

from ... import te
from ...relay.ty import TensorType
from ...target.simd import float32_lanes
from ..schedule_context import ScheduleContext

MAX_POOL_ROWS = "ts_max_pool2d_float32"
MIN_LANES = 8  # AVX2 and up, as the other row kernels


def max_pool2d_rows(x: te.Tensor, kernel: tuple[int, ...], strides: tuple[int, ...], padding: tuple[int, ...],
                    dilation: tuple[int, ...], out: TensorType, sched: ScheduleContext) -> te.Tensor | None:
    """The NCHW max pool of `x` as a row-kernel call, or None where the staged reduction is kept."""
    if (x.ndim != 4 or x.dtype != "float32" or out.dtype != "float32" or any(d != 1 for d in dilation)
            or not any(padding) or strides == (1, 1) or (float32_lanes(sched.target) or 0) < MIN_LANES):
        return None
    batch, channels, height, width = x.shape
    _, _, out_h, out_w = out.shape
    return te.extern(out.shape, [x], lambda ins, y: te.call_extern(
        MAX_POOL_ROWS, batch * channels, height, width, out_h, out_w, kernel[0], kernel[1], strides[0],
        strides[1], padding[0], padding[1], te.pointer(ins[0]), te.pointer(y)), name="max_pool")
