"""PooledBranchAsBias: the broadcast inputs of a concatenation a pointwise convolution reads become a bias.

DeepLabV3's ASPP head concatenates four 256-channel branches with an image-pooling branch, a 1x1
convolution of the pooled vector broadcast back over the 14x14 map, and projects the 1280 channels
with a 1x1 convolution. A pointwise convolution is linear in its input channels, so the pooled
branch's share of it is the same at every position: the weight's columns for those channels times
the vector, once, a per-channel bias. So

    conv(concat(a, b, broadcast_to(v)), W)  ->  conv(concat(a, b), W[:, a, b]) + conv(v, W[:, v])

where the second convolution runs on the one-position vector (`PointwiseConvOnVectors` then makes it
a matrix product) and its (N, O, 1, 1) result broadcasts in the add, which fuses into the first
convolution's epilogue. The projection loses a fifth of its multiply-adds, and the concatenation no
longer writes the broadcast map.

Only a constant-weight pointwise convolution (1x1, stride 1, unpadded, one group) of a concatenation
along the channels whose broadcast inputs keep their batch and channels (only spatial dims grow).
"""

from __future__ import annotations

import numpy as np

from ..op import elemwise
from ..op.nn.conv import CONV_BY_RANK, ConvAttrs
from ..op.registry import Op
from ..op.transform import BroadcastToAttrs, ConcatAttrs, broadcast_to, concatenate
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from .call_rewrite import rewrite_calls
from .pass_infra import FunctionPass, PassContext

_CONVS = frozenset(CONV_BY_RANK.values())


def _is_pointwise(call: Call) -> bool:
    attrs, weight = call.attrs, call.args[1]
    return (isinstance(attrs, ConvAttrs) and isinstance(weight, Constant) and attrs.groups == 1
            and all(k == 1 for k in weight.data.shape[2:]) and all(s == 1 for s in attrs.strides)
            and not any(attrs.padding))


def _vector(old: Expr, new: Expr) -> Expr | None:
    """The (N, C, 1, ...) source of `new` if it is a broadcast only along the spatial dims, else None."""
    if not (isinstance(new, Call) and new.op is broadcast_to and isinstance(new.attrs, BroadcastToAttrs)
            and isinstance(old, Call)):
        return None
    source, out = old.args[0].checked_type_, old.checked_type_
    if not (isinstance(source, TensorType) and isinstance(out, TensorType) and source.ndim == out.ndim):
        return None
    if source.shape[:2] != out.shape[:2] or any(d != 1 for d in source.shape[2:]):
        return None
    return new.args[0]


def _as_bias(old: Call, new: Call) -> Expr | None:
    """`new` (`old` with rewritten arguments; the types are read from `old`) with the broadcast inputs of its
    concatenated input a bias, or None."""
    if not (isinstance(new.op, Op) and new.op in _CONVS and _is_pointwise(new)):
        return None
    cat_old, cat = old.args[0], new.args[0]
    if not (isinstance(cat, Call) and cat.op is concatenate and isinstance(cat_old, Call)
            and isinstance(cat.attrs, ConcatAttrs)):
        return None
    cat_type = cat_old.checked_type_
    if not isinstance(cat_type, TensorType) or cat.attrs.axis % cat_type.ndim != 1:
        return None
    weight = new.args[1]
    assert isinstance(weight, Constant)  # (`_is_pointwise`)
    kept: list[tuple[Expr, np.ndarray]] = []
    vectors: list[tuple[Expr, np.ndarray]] = []
    first = 0
    for part_old, part in zip(cat_old.args, cat.args):
        part_type = part_old.checked_type_
        if not isinstance(part_type, TensorType):
            return None
        columns = weight.data[:, first:first + part_type.shape[1]]
        first += part_type.shape[1]
        vector = _vector(part_old, part)
        (kept if vector is None else vectors).append((part if vector is None else vector, columns))
    if not vectors or not kept:
        return None

    def conv_of(parts: list[tuple[Expr, np.ndarray]]) -> Expr:
        x = parts[0][0] if len(parts) == 1 else concatenate(*(p for p, _ in parts), axis=1)
        w = np.ascontiguousarray(np.concatenate([c for _, c in parts], axis=1))
        return Call(new.op, (x, Constant(w)), new.attrs)

    total = conv_of(kept)
    for pooled in vectors:
        total = elemwise.add(total, conv_of([pooled]))
    return total


def pooled_branches_as_bias(func: Function, mod: IRModule | None = None) -> Function:
    """`func` with the broadcast inputs of every pointwise convolution's concatenation a bias (module doc)."""
    return rewrite_calls(func, _as_bias, mod)


class PooledBranchAsBias(FunctionPass):
    """Runs `pooled_branches_as_bias` on every function."""

    name = "PooledBranchAsBias"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return pooled_branches_as_bias(func, mod)
