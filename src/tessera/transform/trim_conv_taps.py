"""TrimConvTaps: drop the kernel taps of a dilated convolution that read only padding.

With dilation at least the map's size, the outer taps of a kernel never reach the input: DeepLabV3's
ASPP runs 3x3 convolutions of dilation 24 and 36 (padding = dilation) on a 14x14 map, where tap k of
output o reads input o - 24 + 24k, inside the map only for k = 1. Such a convolution is exactly a
smaller one: along each spatial dim the taps that reach the input for some output form a range
[lo, hi) (`DimGeometry.reach`), and the convolution with only those taps (the weight sliced at
compile time), padding pad_begin - lo*dilation before and pad_end - (kernel - hi)*dilation after,
has the same outputs. In the ASPP case that is a 1x1 unpadded convolution, which then runs as a
GEMM (`conv_gemm`) with packed weights. (Taps that reach the input for only some outputs stay:
`conv_regions` splits those outputs.)

Only convolutions with a constant weight are trimmed, and a dim only where both new pads are
non-negative (a tap that skips the whole input under a stride wider than it is left alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..op.nn.conv import CONV_BY_RANK, ConvAttrs
from ..op.nn.conv_regions import DimGeometry
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from .call_rewrite import rewrite_calls
from .pass_infra import FunctionPass, PassContext

_CONVS = frozenset(CONV_BY_RANK.values())


def reaching_taps(dim: DimGeometry) -> tuple[int, int]:
    """The taps [lo, hi) that read the input for at least one output along `dim` ((0, 0): none does)."""
    reached = [k for o in range(dim.out) for k in range(*dim.reach(o))]
    return (min(reached), max(reached) + 1) if reached else (0, 0)


def trimmed_attrs(attrs: ConvAttrs, kernel: Sequence[int], in_spatial: Sequence[int],
                  out_spatial: Sequence[int]) -> tuple[ConvAttrs, tuple[slice, ...]] | None:
    """The attributes of the convolution with only its reaching taps, and the slices of the weight's
    spatial dims that keep them; None when no tap can go."""
    d = len(kernel)
    begins, ends = list(attrs.padding[:d]), list(attrs.padding[d:])
    dilation = list(attrs.dilation)
    keep: list[slice] = []
    for k in range(d):
        dim = DimGeometry(in_spatial[k], out_spatial[k], kernel[k], attrs.strides[k], attrs.dilation[k], begins[k])
        lo, hi = reaching_taps(dim)
        begin, end = begins[k] - lo * dim.dilation, ends[k] - (kernel[k] - hi) * dim.dilation
        if hi == lo or (lo, hi) == (0, kernel[k]) or begin < 0 or end < 0:
            keep.append(slice(0, kernel[k]))
            continue
        begins[k], ends[k] = begin, end
        if hi - lo == 1:
            dilation[k] = 1  # one tap: the dilation no longer matters, and 1 lets a 1x1 run as a GEMM
        keep.append(slice(lo, hi))
    if all(s == slice(0, n) for s, n in zip(keep, kernel)):
        return None
    return replace(attrs, padding=(*begins, *ends), dilation=tuple(dilation)), tuple(keep)


def _trimmed(old: Call, new: Call) -> Expr | None:
    """`new` (`old` with rewritten arguments; the types are read from `old`) with its unreaching taps
    dropped, or None."""
    if new.op not in _CONVS or not isinstance(new.args[1], Constant) or not isinstance(new.attrs, ConvAttrs):
        return None
    x_type, out = old.args[0].checked_type_, old.checked_type_
    if not (isinstance(x_type, TensorType) and isinstance(out, TensorType)):
        return None
    weight = new.args[1].data
    trimmed = trimmed_attrs(new.attrs, weight.shape[2:], x_type.shape[2:], out.shape[2:])
    if trimmed is None:
        return None
    attrs, keep = trimmed
    sliced = np.ascontiguousarray(weight[(slice(None), slice(None), *keep)])
    return Call(new.op, (new.args[0], Constant(sliced)), attrs)


def trim_conv_taps(func: Function, mod: IRModule | None = None) -> Function:
    """`func` with every constant-weight convolution's taps that read only padding dropped (module doc)."""
    return rewrite_calls(func, _trimmed, mod)


class TrimConvTaps(FunctionPass):
    """Runs `trim_conv_taps` on every function."""

    name = "TrimConvTaps"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return trim_conv_taps(func, mod)
