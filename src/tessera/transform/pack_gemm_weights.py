"""PackGemmWeights: constant weights of float32 matrix products (and pointwise convolutions) packed at compile time.

The GEMM microkernel (`op.nn.gemm`) reads B as micro-panels of NR columns,
k-major. Packing them costs a strided pass over B on every call: about 5%
of a 197-token ViT projection, more for fewer rows. A weight is a constant,
so this pass packs it once: `nn.matmul(a, W)` with W a float32 (k, n)
constant becomes `nn.matmul_prepacked(a, pack_b_panels(W, NR), columns=n)`,
whose kernel skips B's packing.

NR is the target's default kernel's (32 for AVX-512, 16 for AVX2); targets
without a microkernel, and products with too few rows to use it, keep
`nn.matmul`.

A pointwise convolution's weight is the product's left operand (output x
input channels): `nn.conv2d(x, W)`, 1x1 and running as microkernel calls
(`op.nn.conv_gemm.prepacked_pointwise_kernel`), becomes
`nn.conv2d_pointwise_prepacked(x, pack_pointwise_weights(W, groups, MR))`,
or, on small maps and deep reductions, `nn.conv2d_pointwise_transposed(x,
pack_pointwise_weights(W, 1, NR))` (outᵀ = Xᵀ Wᵀ, `prepacked_pointwise_plan`
picks), an input scaled by a squeeze-and-excitation gate folded into the
packed weight (`channel_gate`). It runs after partitioning, on the host's calls only: an
accelerator's patterns (e.g. `blas.matmul`) have taken theirs already, and
functions owned by another compiler are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..op.elemwise import multiply
from ..op.nn.conv import ConvAttrs, conv2d
from ..op.nn.conv_blocked import blocked_block, conv2d_blocked, pack_blocked_weights
from ..op.nn.conv_gemm import is_pointwise, pack_pointwise_weights, prepacked_pointwise_plan
from ..op.nn.conv_planes_gemm import conv2d_planes_prepacked, pack_planes_weights, planes_gemm_kernel
from ..op.nn.conv_prepacked import conv2d_pointwise_prepacked, conv2d_pointwise_transposed
from ..op.nn.conv_schedule import ConvGeometry
from ..op.nn.gemm import pack_b_panels, prepacked_panel_width
from ..op.nn.matmul import matmul
from ..op.nn.matmul_prepacked import matmul_prepacked
from ..op.registry import Op
from ..op.transform import reshape
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..target.target import Target
from .channel_gate import gated_input, use_counts
from .call_rewrite import rewrite_calls
from .pass_infra import FunctionPass, PassContext


def _packed_matmul(old: Call, new: Call, target: Target, uses: dict[int, int]) -> Expr | None:
    """`new` (`old` with its arguments rewritten, so untyped: the types are read from `old`) with its weight
    packed, or None if it is not a product the microkernel runs on a constant B."""
    a, w = new.args
    a_type, out = old.args[0].checked_type_, old.checked_type_
    if not (isinstance(w, Constant) and isinstance(a_type, TensorType) and isinstance(out, TensorType)):
        return None
    weight = w.data
    if weight.ndim != 2 or weight.dtype != np.float32 or a_type.ndim < 2 or out.dtype != "float32":
        return None
    nr = prepacked_panel_width(target, math.prod(a_type.shape[:-1]))
    if nr is None:
        return None
    return matmul_prepacked(a, Constant(pack_b_panels(weight, nr)), columns=weight.shape[1])


class _Conv(NamedTuple):
    x: Expr  # the rewritten input
    weight: np.ndarray  # the constant float32 OIHW weight
    attrs: ConvAttrs
    x_type: TensorType
    out: TensorType


def _float32_conv(old: Call, new: Call) -> _Conv | None:
    """The parts of a float32 2-d convolution `new` on a constant weight (types read from the typed `old`)."""
    x, w = new.args
    attrs, x_type, out = new.attrs, old.args[0].checked_type_, old.checked_type_
    if not (isinstance(w, Constant) and isinstance(attrs, ConvAttrs) and isinstance(x_type, TensorType)
            and isinstance(out, TensorType)):
        return None
    if w.data.dtype != np.float32 or x_type.dtype != "float32" or w.data.ndim != 4:
        return None
    return _Conv(x, w.data, attrs, x_type, out)


def _packed_conv2d(old: Call, new: Call, target: Target, uses: dict[int, int]) -> Expr | None:
    """`new` with its weight packed as A micro-panels (or, transposed, as Wᵀ's B panels), or None if it is
    no pointwise float32 convolution the microkernel runs on a constant weight. An input x * g with a
    run-time per-channel gate g (`channel_gate.gated_input`: squeeze-and-excitation) is folded: the
    convolution reads x, and the packed W is scaled by g at run time. Both layouts keep the input channel
    as their third axis, so g broadcasts as (1, 1, C, 1), and the zero padding stays zero."""
    conv = _float32_conv(old, new)
    if conv is None or conv.weight.shape[2:] != (1, 1):
        return None
    x, weight, attrs, x_type, out = conv
    geometry = ConvGeometry(tuple(out.shape), (1, 1), attrs.strides, attrs.dilation, weight.shape[1],
                            weight.shape[0] // attrs.groups, in_spatial=tuple(x_type.shape[2:]))
    plan = prepacked_pointwise_plan(target, geometry) if is_pointwise(geometry, attrs.padding) else None
    if plan is None:
        return None
    kernel = plan.kernel
    packed: Expr = Constant(pack_pointwise_weights(weight, 1 if plan.transposed else attrs.groups,
                                                   kernel.nr if plan.transposed else kernel.mr))
    gated = gated_input(old, new, uses)
    if gated is not None:
        x, gate = gated
        packed = multiply(packed, reshape(gate, newshape=(1, 1, weight.shape[1], 1)))
    if plan.transposed:  # one group: Wᵀ's B panels
        return conv2d_pointwise_transposed(x, packed, channels=weight.shape[0], panel_height=kernel.mr)
    return conv2d_pointwise_prepacked(x, packed, channels=weight.shape[0], panel_width=kernel.nr)


def _blocked_conv2d(old: Call, new: Call, target: Target) -> Expr | None:
    """`new` with its weight packed in blocks of output channels (`nn.conv2d_blocked`), or None where
    `blocked_block` keeps the planar schedule."""
    conv = _float32_conv(old, new)
    if conv is None:
        return None
    x, weight, attrs, x_type, out = conv
    block = blocked_block(target, tuple(x_type.shape[2:]), weight.shape[0], tuple(out.shape[2:]),
                          tuple(weight.shape[2:]), attrs)
    if block is None:
        return None
    return conv2d_blocked(x, Constant(pack_blocked_weights(weight, block)), strides=tuple(attrs.strides),
                          padding=tuple(attrs.padding), dilation=tuple(attrs.dilation))


def _planes_conv2d(old: Call, new: Call, target: Target) -> Expr | None:
    """`new` with its weight packed as the A micro-panels of one GEMM over the input planes
    (`nn.conv2d_planes_prepacked`), or None where `planes_gemm_kernel` leaves it to the other schedules."""
    conv = _float32_conv(old, new)
    if conv is None:
        return None
    x, weight, attrs, x_type, out = conv
    kernel = planes_gemm_kernel(target, tuple(x_type.shape), tuple(out.shape), tuple(weight.shape[2:]), attrs)
    if kernel is None:
        return None
    return conv2d_planes_prepacked(x, Constant(pack_planes_weights(weight, kernel.mr)), channels=weight.shape[0],
                                   kernel_size=tuple(weight.shape[2:]), strides=tuple(attrs.strides),
                                   padding=tuple(attrs.padding), dilation=tuple(attrs.dilation), panel_width=kernel.nr)


def _packed_any_conv2d(old: Call, new: Call, target: Target, uses: dict[int, int]) -> Expr | None:
    return (_packed_conv2d(old, new, target, uses) or _planes_conv2d(old, new, target)
            or _blocked_conv2d(old, new, target))


# (old call, rewritten call, target, use counts of the function) -> the packed call or None
_PACKERS: dict[Op, Callable[[Call, Call, Target, dict[int, int]], Expr | None]] = {
    matmul: _packed_matmul,
    conv2d: _packed_any_conv2d,
}
# the operator each packed form stands for (partition reports name the operator partitioning saw)
PACKED_FORMS: dict[str, str] = {
    matmul_prepacked.name: matmul.name,
    conv2d_pointwise_prepacked.name: conv2d.name,
    conv2d_pointwise_transposed.name: conv2d.name,
    conv2d_blocked.name: conv2d.name,
    conv2d_planes_prepacked.name: conv2d.name,
}


def _packed(old: Call, new: Call, target: Target, uses: dict[int, int]) -> Expr | None:
    packer = _PACKERS.get(new.op) if isinstance(new.op, Op) else None
    return packer(old, new, target, uses) if packer is not None else None


def pack_gemm_weights(func: Function, target: Target, mod: IRModule | None = None) -> Function:
    """`func` with every constant weight of a host float32 product or pointwise convolution packed (see the
    module doc)."""
    uses = use_counts(func)

    return rewrite_calls(func, lambda old, new: _packed(old, new, target, uses), mod)


class PackGemmWeights(FunctionPass):
    """Runs `pack_gemm_weights` for the host `target` on every function no other compiler owns."""

    name = "PackGemmWeights"
    opt_level = 1

    def __init__(self, target: Target) -> None:
        self.target = target

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if func.attrs.compiler is not None:
            return func
        return pack_gemm_weights(func, self.target, mod)
