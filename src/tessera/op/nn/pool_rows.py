"""2-d max and average pooling as a call of a window kernel whose border is tested apart.

As TE stages, a strided window with padding tests every tap against the
border and clamps its index (a select per tap), and gcc vectorises none of
it: ResNet-50's 3x3 stride-2 max pool with padding 1 took 1.9 ms at one
thread (AMD EPYC, AVX-512) where the same pool without padding takes
0.12 ms. A stride-1 window pads a copy of the whole input first and then
walks the output once per tap: Inception's 3x3 pools took 4x onnxruntime.

`Pool2dKernel` names a C function (text in `tessera.codegen.c_pool`) made
for one window shape and stride, so the taps are constants gcc unrolls:
output positions whose window lies inside the input read their taps with
no test, one output row at a time (vectorised across the row, strided
loads for a stride of 2), and only the border rows and columns test each
tap. The taps are combined in the staged kernel's order, max by
`a > b ? a : b`, so the result is the same, up to NaN inputs and the sign
of a zero sum. Pools without padding, short rows, dilated windows and
other ranks keep the stages (see MIN_ROW).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import te
from ...relay.ty import TensorType
from ...target.simd import float32_lanes
from ..schedule_context import ScheduleContext

if TYPE_CHECKING:
    from .pool import PoolAttrs

MIN_LANES = 8  # AVX2 and up, measured there; other targets (Cortex-M among them) keep the stages and their C
MAX_TAPS = 64  # windows with more taps keep the stages: the taps are unrolled
# Output rows at least this wide. Against the stages at one thread (AMD EPYC, AVX-512), padded pools:
# 0.11 of the time for 64 x 112 x 112 -> 56 x 56 (3x3, stride 2), 0.62 for 24 x 56 x 56 -> 28 x 28 (average),
# 0.71 for 192 x 27 x 27 (3x3, stride 1), 0.68 for 192 x 28 x 28 (average, stride 1); but 0.96 to 1.5 for
# rows of 14 or fewer (14 x 14 and 7 x 7 maps: the short rows' ends cost more than the tests). x86-64-v3
# code on the same CPU: 0.09, 0.53, 0.53 and 0.67.
MIN_ROW = 16


@dataclass(frozen=True)
class Pool2dKernel:
    """The C pooling kernel of one window shape and stride (the rest are its arguments)."""

    average: bool
    kernel: tuple[int, int]
    strides: tuple[int, int]

    @property
    def symbol(self) -> str:
        (kh, kw), (sh, sw) = self.kernel, self.strides
        return f"ts_pool2d_{'avg' if self.average else 'max'}_{kh}x{kw}_s{sh}x{sw}_float32"

    @classmethod
    def from_symbol(cls, name: str) -> "Pool2dKernel | None":
        """The kernel a C symbol names, or None if it names none (codegen's look-up of a call)."""
        m = re.fullmatch(r"ts_pool2d_(max|avg)_(\d+)x(\d+)_s(\d+)x(\d+)_float32", name)
        if m is None:
            return None
        kh, kw, sh, sw = (int(g) for g in m.groups()[1:])
        return cls(m.group(1) == "avg", (kh, kw), (sh, sw))


def pool2d_call(x: te.Tensor, attrs: PoolAttrs, out: TensorType, sched: ScheduleContext,
                average: bool) -> te.Tensor | None:
    """The pooling of NCHW float32 `x` as a kernel call, or None where the stages are kept."""
    if len(attrs.kernel) != 2 or x.ndim != 4 or x.dtype != "float32" or out.dtype != "float32":
        return None
    if attrs.dilation != (1, 1) or math.prod(attrs.kernel) > MAX_TAPS or out.shape[3] < MIN_ROW:
        return None
    # without padding no tap is tested: the stages vectorise as well (2x2 stride-2 maps: 0.6 of this kernel's time)
    if not any(attrs.padding):
        return None
    if (float32_lanes(sched.target) or 0) < MIN_LANES:
        return None
    (pt, pl, pb, pr), (h, w), (oh, ow) = attrs.padding, x.shape[2:], out.shape[2:]
    # the rows and columns an average counts: the input's, or the input's and its declared padding's
    lo_y, hi_y, lo_x, hi_x = (-pt, h + pb, -pl, w + pr) if attrs.count_include_pad else (0, h, 0, w)
    kernel = Pool2dKernel(average, (attrs.kernel[0], attrs.kernel[1]), (attrs.strides[0], attrs.strides[1]))
    planes = x.shape[0] * x.shape[1]
    return te.extern(out.shape, [x], lambda ins, y: te.call_extern(
        kernel.symbol, planes, h, w, oh, ow, pt, pl, lo_y, hi_y, lo_x, hi_x, te.pointer(ins[0]), te.pointer(y)),
        name="avg_pool" if average else "max_pool")
