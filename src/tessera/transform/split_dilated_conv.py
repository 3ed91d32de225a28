"""SplitDilatedConv: a sparsely reaching dilated convolution as a sum of one-tap (pointwise) convolutions.

When the dilation is large against the map, each tap reads the input for only a few outputs: in
DeepLabV3's ASPP (3x3, dilation 12, padding 12, on 14x14) the centre tap reads it everywhere, the
edge taps for two rows or columns, the corner taps for 2x2 outputs, 324 of 9 x 196 tap-positions.
`conv_regions` splits such a convolution into per-tap pieces inside one kernel, but each piece reads
its tap's weights out of the OIHW weight (a stride of kh*kw floats): the nine pieces stream the whole
weight (2.4 MB at 256 channels, beyond L2) nine times, and the kernel ran 2x onnxruntime's.

Here the weight is a constant, so each tap's weights are sliced out at compile time, contiguous:
tap k reaches the input for the outputs of `tap_pieces` (a box, the product of one span per dim),
and there the convolution is a pointwise one of the input's box those outputs read (a strided
slice), with the tap's (out, in/groups) weights. The pieces, zero-padded to the output's shape
(a piece covering the whole output is not), are summed, the largest first; bias and activation
follow as before. The piece covering the whole map (ASPP's centre tap) runs as any 1x1 convolution.

A convolution is split only when its taps reach the input for at most MAX_REACHING of its
tap-positions and it has at most MAX_PIECES pieces: where most taps read the map, its own schedule
(one kernel, no sums) does better. `TrimConvTaps` runs first, so a dim none of whose outer taps
reaches the input has already lost them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..op import elemwise
from ..op.nn.conv import CONV_BY_RANK, ConvAttrs
from ..op.nn.conv_regions import DimGeometry, Span, tap_pieces
from ..op.registry import Op
from ..op.transform import strided_slice
from ..op.transform_pad import pad
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from .call_rewrite import rewrite_calls
from .pass_infra import FunctionPass, PassContext
from .pointwise_products import pointwise_product

_CONVS = frozenset(CONV_BY_RANK.values())
# split when the taps reach the input for at most this fraction of kernel taps x outputs. Measured (3x3,
# padding = dilation, AMD EPYC Zen 4, AVX-512, one thread, split / whole kernel): at reach 0.18 to 0.33
# 0.28x-0.59x (256 channels on 14x14 and 28x28, 64 on 14x14); from 0.38 to 0.82 anywhere from 0.39x to
# 1.09x (dilation 12 on 28x28 at 256 channels, 0.51, and dilation 4 at 32, 0.82, ran slower split)
MAX_REACHING = 1 / 3
MAX_PIECES = 9  # kernels a split adds, one per piece
# pieces of fewer output positions run as matrix products, positions as rows: at 256 channels, 4 positions
# (an ASPP corner) took 11 us so against 42 us as a convolution, 16 took 23 against 42, 20 took 33 against 39,
# 24 and 28 about 38 either way (AMD EPYC Zen 4, AVX-512, one thread)
MATMUL_BELOW = 24


def _dims(attrs: ConvAttrs, kernel: tuple[int, ...], in_spatial: tuple[int, ...],
          out_spatial: tuple[int, ...]) -> list[DimGeometry]:
    return [DimGeometry(in_spatial[k], out_spatial[k], kernel[k], attrs.strides[k], attrs.dilation[k],
                        attrs.padding[k]) for k in range(len(kernel))]


def split_pieces(attrs: ConvAttrs, kernel: tuple[int, ...], in_spatial: tuple[int, ...],
                 out_spatial: tuple[int, ...]) -> list[tuple[Span, ...]] | None:
    """The pieces of a convolution worth splitting (one span of one tap per dim), the largest first;
    None to keep it whole (undilated, or reaching the input too often, see the module doc)."""
    if all(d == 1 for d in attrs.dilation):
        return None
    dims = _dims(attrs, kernel, in_spatial, out_spatial)
    pieces = list(itertools.product(*(tap_pieces(dim) for dim in dims)))
    reaching = sum(math.prod(span.size for span in piece) for piece in pieces)
    if not pieces or len(pieces) > MAX_PIECES or reaching > MAX_REACHING * math.prod(kernel) * math.prod(out_spatial):
        return None
    return sorted(pieces, key=lambda piece: -math.prod(span.size for span in piece))  # stable: tap order on ties


def _pointwise(x: Expr, weight: np.ndarray, op: Op, groups: int, box: tuple[int, ...], batch: int) -> Expr:
    """The pointwise convolution of `x` (a box of the input) with `weight` (out, in/groups, 1, ...): as a
    matrix product with the positions as rows when the box is so small that a convolution's tiles (16 or
    more positions wide) would mostly compute nothing."""
    if groups > 1 or math.prod(box) >= MATMUL_BELOW:
        d = len(box)
        attrs = ConvAttrs(strides=(1,) * d, padding=(0,) * (2 * d), dilation=(1,) * d, groups=groups)
        return Call(op, (x, Constant(np.ascontiguousarray(weight))), attrs)
    return pointwise_product(x, weight, box, batch)


def _piece(x: Expr, x_type: TensorType, weight: np.ndarray, op: Op, groups: int, dims: list[DimGeometry],
           piece: tuple[Span, ...]) -> Expr:
    """The pointwise convolution of `piece` over its box of outputs."""
    first = [dim.first_input(span) for dim, span in zip(dims, piece)]
    last = [f + (span.size - 1) * dim.stride for f, dim, span in zip(first, dims, piece)]
    lead = x_type.ndim - len(dims)
    if not all(f == 0 and l == dim.size - 1 and dim.stride == 1 for f, l, dim in zip(first, last, dims)):
        x = strided_slice(x, begin=(0,) * lead + tuple(first), end=(*x_type.shape[:lead], *(l + 1 for l in last)),
                          strides=(1,) * lead + tuple(dim.stride for dim in dims))
    taps = tuple(slice(span.tap_start, span.tap_stop) for span in piece)
    box = tuple(span.size for span in piece)
    return _pointwise(x, weight[(slice(None), slice(None), *taps)], op, groups, box, x_type.shape[0])


def _padded(term: Expr, widths: tuple[tuple[int, int], ...], dtype: np.dtype) -> Expr:
    """`term` with zeros around its spatial dims (`widths`: before and after each)."""
    if not any(before or after for before, after in widths):
        return term
    return pad(term, Constant(np.zeros((), dtype=dtype)), pad_width=((0, 0), (0, 0), *widths), mode="constant")


def _sum(terms: list[Expr]) -> Expr:
    total = terms[0]
    for term in terms[1:]:
        total = elemwise.add(total, term)
    return total


def _split(old: Call, new: Call) -> Expr | None:
    """`new` (`old` with rewritten arguments; the types are read from `old`) as a sum of pieces, or None.

    The pieces of one span along the first dim (ASPP's two rows a row tap reaches) are summed in
    their band, padded along the other dims only, and each band is then padded to the whole output:
    fewer whole-output zero maps to write and add than one per piece."""
    if not (isinstance(new.op, Op) and new.op in _CONVS and isinstance(new.args[1], Constant)
            and isinstance(new.attrs, ConvAttrs)):
        return None
    x_type, out = old.args[0].checked_type_, old.checked_type_
    if not (isinstance(x_type, TensorType) and isinstance(out, TensorType)):
        return None
    weight = new.args[1].data
    if weight.dtype != np.float32:
        return None  # the matrix-product pieces and their thresholds are float32 kernels
    kernel, in_spatial, out_spatial = tuple(weight.shape[2:]), tuple(x_type.shape[2:]), tuple(out.shape[2:])
    pieces = split_pieces(new.attrs, kernel, in_spatial, out_spatial)
    if pieces is None:
        return None
    dims = _dims(new.attrs, kernel, in_spatial, out_spatial)
    bands: dict[tuple[int, int], list[Expr]] = {}  # in the order of each band's largest piece
    for piece in pieces:
        term = _piece(new.args[0], x_type, weight, new.op, new.attrs.groups, dims, piece)
        others = tuple((span.start, dim.out - span.stop) for dim, span in zip(dims[1:], piece[1:]))
        bands.setdefault((piece[0].start, piece[0].stop), []).append(_padded(term, ((0, 0), *others), weight.dtype))
    rest = ((0, 0),) * (len(dims) - 1)
    return _sum([_padded(_sum(terms), ((start, dims[0].out - stop), *rest), weight.dtype)
                 for (start, stop), terms in bands.items()])


def split_dilated_convs(func: Function, mod: IRModule | None = None) -> Function:
    """`func` with every sparsely reaching constant-weight dilated convolution split (module doc)."""
    return rewrite_calls(func, _split, mod)


class SplitDilatedConv(FunctionPass):
    """Runs `split_dilated_convs` on every function."""

    name = "SplitDilatedConv"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return split_dilated_convs(func, mod)
