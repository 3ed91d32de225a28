"""FoldChannelGate: a run-time per-channel scale of a convolution's input folded into its weight.

Squeeze-and-excitation (MobileNetV3, EfficientNet) multiplies a feature map
by a gate of one value per channel, computed from that same map (global
average pool, two small convolutions, a sigmoid), and a 1x1 convolution
reads the product. The gate depends on the whole map, so the multiply
cannot run in the producer's epilogue: it is a pass of its own over the map
(EfficientNet's 96 x 56 x 56: ~13 µs at one thread on Zen 4). Scaling input
channel c scales weight column c, so for one image

    conv2d(x * g, W) = conv2d(x, W * g)    (g of shape (1, C, 1, 1))

and the multiply shrinks to the weight's size (96 x 16 values instead of
96 x 3136). Zero padding commutes with the scale. Folded only where it is
exact and saves work: a single image, one group, a constant weight, a gate
that varies along channels only, and a product no other expression reads.
The weight then is computed at run time, so PackGemmWeights leaves it.
"""

from __future__ import annotations

import math

from ..op import elemwise
from ..op import transform as tf
from ..op.nn import conv as conv_ops
from ..relay.expr import Call, Constant, Expr, Function, children
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import post_order, rewrite
from .infer_type import infer_function
from .pass_infra import FunctionPass, PassContext


def _use_counts(func: Function) -> dict[int, int]:
    uses: dict[int, int] = {}
    for node in post_order(func):
        for child in children(node):
            uses[id(child)] = uses.get(id(child), 0) + 1
    return uses


def _channel_gate(gate: Expr, x: TensorType) -> bool:
    """Whether `gate` (typed) is one value per channel of the one-image NCHW map `x`: shape (1, C, 1, 1) or
    (C, 1, 1), not a constant (SimplifyInference folds constant scales already)."""
    ty = gate.checked_type_
    if isinstance(gate, Constant) or not isinstance(ty, TensorType) or ty.dtype != x.dtype:
        return False
    full = (1,) * (x.ndim - ty.ndim) + tuple(ty.shape)
    return len(full) == x.ndim and full[1] == x.shape[1] and math.prod(full) == x.shape[1]


def _folded(old: Call, new: Call, uses: dict[int, int]) -> Expr | None:
    """conv2d(x * g, W) as conv2d(x, W * g), or None where the fold does not apply (see the module doc)."""
    if new.op is not conv_ops.conv2d or not isinstance(new.args[1], Constant):
        return None
    product_old, product = old.args[0], new.args[0]
    if not (isinstance(product, Call) and isinstance(product_old, Call) and product.op is elemwise.multiply
            and uses.get(id(product_old), 0) == 1):
        return None
    attrs = new.attrs_as(conv_ops.ConvAttrs)
    out = product_old.checked_type_
    if attrs.groups != 1 or not isinstance(out, TensorType) or out.ndim != 4 or out.shape[0] != 1:
        return None
    for k in (0, 1):
        x_old, gate_old = product_old.args[k], product_old.args[1 - k]
        if x_old.checked_type_ == out and _channel_gate(gate_old, out):
            row = tf.reshape(product.args[1 - k], newshape=(1, out.shape[1], 1, 1))  # broadcast over outputs
            weight = elemwise.multiply(new.args[1], row)
            return Call(new.op, (product.args[k], weight), new.attrs)
    return None


def fold_channel_gates(func: Function, mod: IRModule | None = None) -> Function:
    """`func` with every foldable gated convolution input folded into the weight."""
    func = infer_function(func, mod)
    uses = _use_counts(func)

    def visit(old: Expr, new: Expr) -> Expr | None:
        return _folded(old, new, uses) if isinstance(old, Call) and isinstance(new, Call) else None

    out = rewrite(func, visit)
    return func if out is func else infer_function(out, mod)


class FoldChannelGate(FunctionPass):
    """Runs `fold_channel_gates` on every function."""

    name = "FoldChannelGate"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return fold_channel_gates(func, mod)
