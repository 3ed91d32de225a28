"""A run-time per-channel scale of a pointwise convolution's input, to be folded into its packed weight.

Squeeze-and-excitation (MobileNetV3, EfficientNet) multiplies a feature map
by a gate of one value per channel, computed from that same map (global
average pool, two small convolutions, a sigmoid), and a 1x1 convolution
reads the product. The gate depends on the whole map, so the multiply
cannot run in the producer's epilogue: it is a pass of its own over the map
(EfficientNet's 96 x 56 x 56: about 13 µs at one thread on Zen 4). Scaling
input channel c scales weight column c, so for one image

    conv2d(x * g, W) = conv2d(x, W * g)    (g of shape (1, C, 1, 1))

and the multiply shrinks to the weight's size. PackGemmWeights does the
fold where it packs the weight (`gated_input` finds the pattern): it packs W
at compile time and scales the packed panels by g at run time. Folded only
where it is exact and saves work: one image, one group, float32, a gate that
varies along channels only and is not a constant (SimplifyInference folds
those), and a product no other expression reads.
"""

from __future__ import annotations

import math

from ..op import elemwise
from ..op.nn import conv as conv_ops
from ..relay.expr import Call, Constant, Expr, Function, children
from ..relay.ty import TensorType
from ..relay.visitor import post_order


def use_counts(func: Function) -> dict[int, int]:
    """Readers of each expression of `func`, by id."""
    uses: dict[int, int] = {}
    for node in post_order(func):
        for child in children(node):
            uses[id(child)] = uses.get(id(child), 0) + 1
    return uses


def _channel_gate(gate: Expr, x: TensorType) -> bool:
    """Whether the typed `gate` is one run-time value per channel of the one-image NCHW map `x`."""
    ty = gate.checked_type_
    if isinstance(gate, Constant) or not isinstance(ty, TensorType) or ty.dtype != x.dtype or ty.ndim > x.ndim:
        return False
    full = (1,) * (x.ndim - ty.ndim) + tuple(ty.shape)
    return full[1] == x.shape[1] and math.prod(full) == x.shape[1]


def gated_input(old: Call, new: Call, uses: dict[int, int]) -> tuple[Expr, Expr] | None:
    """(x, g) of the rewritten `new` = conv2d(x * g, W), g a per-channel gate the weight can absorb (see the
    module doc), or None. `old` is the typed call before rewriting (use counts and types refer to it)."""
    if new.op is not conv_ops.conv2d or new.attrs_as(conv_ops.ConvAttrs).groups != 1:
        return None
    product_old, product = old.args[0], new.args[0]
    if not (isinstance(product, Call) and isinstance(product_old, Call) and product.op is elemwise.multiply
            and uses.get(id(product_old), 0) == 1):
        return None
    out = product_old.checked_type_
    if not isinstance(out, TensorType) or out.ndim != 4 or out.shape[0] != 1 or out.dtype != "float32":
        return None
    for k in (0, 1):
        if product_old.args[k].checked_type_ == out and _channel_gate(product_old.args[1 - k], out):
            return product.args[k], product.args[1 - k]
    return None
