"""PointwiseConvOnVectors: a pointwise convolution of a one-position map as a matrix product.

A convolution's register tiles run along the output positions, 16 or more wide: over a single
position (a pooled vector, as DeepLabV3's image-pooling branch 1x1 after its global average pool)
a tile computes one useful column of sixteen and broadcasts each weight for it. As a matrix product
with the images as rows (`pointwise_product`) the weight streams once, contiguous: the ASPP head's
256-channel pooled 1x1 took 60 us as a convolution (with its bias, ReLU and broadcast), about
20 us so (AMD EPYC Zen 4, AVX-512, one thread).

`pointwise_product` also runs the small pieces of `SplitDilatedConv`.
"""

from __future__ import annotations

import math

import numpy as np

from ..op.nn.conv import CONV_BY_RANK, ConvAttrs
from ..op.nn.matmul import matmul
from ..op.registry import Op
from ..op.transform import reshape, transpose
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from .call_rewrite import rewrite_calls
from .pass_infra import FunctionPass, PassContext

_CONVS = frozenset(CONV_BY_RANK.values())


def pointwise_product(x: Expr, weight: np.ndarray, box: tuple[int, ...], batch: int) -> Expr:
    """The ungrouped pointwise convolution of `x` (batch, in, *box) with `weight` (out, in, 1, ...) as a
    matrix product with the positions as rows: (batch, positions, in) . (in, out), transposed back."""
    out_channels, in_channels = weight.shape[:2]
    positions = math.prod(box)
    rows = transpose(reshape(x, newshape=(batch, in_channels, positions)), axes=(0, 2, 1))
    product = matmul(rows, Constant(np.ascontiguousarray(weight.reshape(out_channels, in_channels).T)))
    return reshape(transpose(product, axes=(0, 2, 1)), newshape=(batch, out_channels, *box))


def _on_vector(old: Call, new: Call) -> Expr | None:
    """`new` (`old` with rewritten arguments; the types are read from `old`) as a product, or None."""
    if not (isinstance(new.op, Op) and new.op in _CONVS and isinstance(new.args[1], Constant)
            and isinstance(new.attrs, ConvAttrs)):
        return None
    x_type, out = old.args[0].checked_type_, old.checked_type_
    if not (isinstance(x_type, TensorType) and isinstance(out, TensorType)):
        return None
    weight, attrs = new.args[1].data, new.attrs
    pointwise = (all(k == 1 for k in weight.shape[2:]) and all(s == 1 for s in attrs.strides)
                 and not any(attrs.padding) and attrs.groups == 1)
    if not (pointwise and weight.dtype == np.float32 and math.prod(out.shape[2:]) == 1):
        return None
    return pointwise_product(new.args[0], weight, tuple(out.shape[2:]), x_type.shape[0])


def pointwise_convs_on_vectors(func: Function, mod: IRModule | None = None) -> Function:
    """`func` with every constant-weight pointwise convolution of a one-position map a product (module doc)."""
    return rewrite_calls(func, _on_vector, mod)


class PointwiseConvOnVectors(FunctionPass):
    """Runs `pointwise_convs_on_vectors` on every function."""

    name = "PointwiseConvOnVectors"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return pointwise_convs_on_vectors(func, mod)
