"""2-d max and average pooling as a call of a kernel made for one pool's shapes.

As TE stages, a strided window with padding tests every tap against the
border and clamps its index (a select per tap), and gcc vectorises none of
it: ResNet-50's 3x3 stride-2 max pool with padding 1 took 1.9 ms at one
thread (AMD EPYC, AVX-512) where the same pool without padding takes
0.12 ms. A stride-1 window pads a copy of the whole input first and then
walks the output once per tap, one short row at a time: Inception-v2's
3x3 average pools (28x28 to 7x7 maps) took 3.8x onnxruntime's time.

`Pool2dKernel` names a C function (text in `tessera.codegen.c_pool`) made
for one window, stride, input and output size, so every loop bound is a
constant gcc unrolls or vectorises exactly. Each plane is copied, a band
of rows at a time, into an L1-resident buffer whose border holds the
neutral value (-inf, or 0 for a sum), so no tap is tested. A stride-1
window then runs over the band as one flat run of positions, across row
ends (the few positions past a row's end are dropped when the band is
copied out), so a 7-wide row costs no vector tail; other strides run a
row of outputs at a time. The taps are combined in the staged kernel's
order, max by `a > b ? a : b`, so the result is the same, up to NaN
inputs and the sign of a zero sum. Planes wider than a band can hold,
windows that tile an unpadded input, dilated windows and other ranks keep
the stages.
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
# Floats of a band buffer (8 KiB: it and the stride-1 results stay in L1). A padded row wider than a band of
# one window's height keeps the stages.
BAND_FLOATS = 2048


@dataclass(frozen=True)
class Pool2dKernel:
    """The C pooling kernel of one window, stride and plane geometry (planes and pointers are its arguments).

    `padding` is the top and left padding: where windows start. Windows past the input's bottom or right
    read the neutral value. An average divides by the taps inside the input, or, with `counted_end`
    (ONNX count_include_pad), by those inside the input and its declared padding (top, left, and
    `counted_end` rows and columns past the end)."""

    average: bool
    kernel: tuple[int, int]
    strides: tuple[int, int]
    in_size: tuple[int, int]
    out_size: tuple[int, int]
    padding: tuple[int, int]
    counted_end: tuple[int, int] | None = None

    @property
    def padded_width(self) -> int:
        """Columns of a band row: every column a window of the output reads, padding included."""
        return (self.out_size[1] - 1) * self.strides[1] + self.kernel[1]

    @property
    def band_rows(self) -> int:
        """Output rows per band: their windows' padded rows fit BAND_FLOATS."""
        (kh, _), (sh, _) = self.kernel, self.strides
        return max(1, min(self.out_size[0], (BAND_FLOATS // self.padded_width - kh) // sh + 1))

    @property
    def symbol(self) -> str:
        (kh, kw), (sh, sw), (h, w), (oh, ow), (pt, pl) = (self.kernel, self.strides, self.in_size, self.out_size,
                                                         self.padding)
        counted = "" if self.counted_end is None else f"_countpad{self.counted_end[0]}x{self.counted_end[1]}"
        return (f"ts_pool2d_{'avg' if self.average else 'max'}_{kh}x{kw}_s{sh}x{sw}_in{h}x{w}_out{oh}x{ow}"
                f"_pad{pt}x{pl}{counted}_float32")

    @classmethod
    def from_symbol(cls, name: str) -> "Pool2dKernel | None":
        """The kernel a C symbol names, or None if it names none (codegen's look-up of a call)."""
        m = re.fullmatch(r"ts_pool2d_(max|avg)_(\d+)x(\d+)_s(\d+)x(\d+)_in(\d+)x(\d+)_out(\d+)x(\d+)"
                         r"_pad(\d+)x(\d+)(?:_countpad(\d+)x(\d+))?_float32", name)
        if m is None:
            return None
        v = [int(g) for g in m.groups()[1:11]]
        counted = None if m.group(12) is None else (int(m.group(12)), int(m.group(13)))
        return cls(m.group(1) == "avg", (v[0], v[1]), (v[2], v[3]), (v[4], v[5]), (v[6], v[7]), (v[8], v[9]),
                   counted)


def pool2d_call(x: te.Tensor, attrs: PoolAttrs, out: TensorType, sched: ScheduleContext,
                average: bool) -> te.Tensor | None:
    """The pooling of NCHW float32 `x` as a kernel call, or None where the stages are kept."""
    if len(attrs.kernel) != 2 or x.ndim != 4 or x.dtype != "float32" or out.dtype != "float32":
        return None
    if attrs.dilation != (1, 1) or math.prod(attrs.kernel) > MAX_TAPS:
        return None
    if (float32_lanes(sched.target) or 0) < MIN_LANES:
        return None
    # windows that tile an unpadded input (VGG's and DenseNet's 2x2 stride 2): the stages read it in place and
    # vectorise about as well as a band copy (0.74-1.26x this kernel's time, 112x112 to 7x7 maps, one run)
    if not any(attrs.padding) and tuple(attrs.kernel) == tuple(attrs.strides):
        return None
    pt, pl, pb, pr = attrs.padding
    counted = (pb, pr) if average and attrs.count_include_pad else None
    kernel = Pool2dKernel(average, (attrs.kernel[0], attrs.kernel[1]), (attrs.strides[0], attrs.strides[1]),
                          (x.shape[2], x.shape[3]), (out.shape[2], out.shape[3]), (pt, pl), counted)
    if kernel.kernel[0] * kernel.padded_width > BAND_FLOATS:
        return None
    planes = x.shape[0] * x.shape[1]
    return te.extern(out.shape, [x], lambda ins, y: te.call_extern(
        kernel.symbol, planes, te.pointer(ins[0]), te.pointer(y)), name="avg_pool" if average else "max_pool")
