"""SimplifyInference: inference-time algebra on trained models.

1. `batch_norm` becomes a per-channel multiply and add.
2. A per-channel multiply after a convolution or matrix product whose weight
   is constant is folded into that weight (`conv(x, W) * s -> conv(x, W * s)`),
   so batch normalisation costs nothing at run time. The remaining add is a
   bias that fuses into the convolution's epilogue.
"""

from __future__ import annotations

import numpy as np

from ..op import elemwise
from ..op.nn import conv as conv_ops
from ..op.nn import matmul as mm_ops
from ..op.nn import norm as norm_ops
from ..relay.expr import Call, Constant, Expr, Function, children
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import post_order, rewrite
from .fold_constant import fold_expr
from .infer_type import infer_expr
from .pass_infra import FunctionPass, PassContext

_CONVS = set(conv_ops.CONV_BY_RANK.values())


def _expand_batch_norm(old: Call, call: Call) -> Expr:
    """`call` (children rewritten) as multiply-add; types come from `old`."""
    x, gamma, beta, mean, var = call.args
    attrs = call.attrs
    ty = old.args[0].checked_type
    assert isinstance(ty, TensorType)
    axis = attrs.axis % ty.ndim
    shape = tuple(ty.shape[axis] if k == axis else 1 for k in range(ty.ndim))
    from ..op import transform as tf

    eps = Constant(np.asarray(attrs.epsilon, dtype=ty.dtype))
    scale = elemwise.divide(gamma, elemwise.sqrt(elemwise.add(var, eps)))
    shift = elemwise.subtract(beta, elemwise.multiply(mean, scale))
    scale_b = tf.reshape(scale, newshape=shape)
    shift_b = tf.reshape(shift, newshape=shape)
    return elemwise.add(elemwise.multiply(x, scale_b), shift_b)


def _channel_vector(c: Constant, out: TensorType, axis: int) -> np.ndarray | None:
    """The per-channel values of a constant that only varies along `axis`."""
    data = c.data
    if data.ndim > out.ndim:
        return None
    full = (1,) * (out.ndim - data.ndim) + data.shape
    if any(d != 1 for k, d in enumerate(full) if k != axis):
        return None
    if full[axis] not in (1, out.shape[axis]):
        return None
    return np.broadcast_to(data.reshape(full[axis]), (out.shape[axis],)).astype(out.dtype)


def _fold_scale(old: Call, call: Call, uses: dict[int, int]) -> Expr | None:
    """multiply(producer(x, W), s) -> producer(x, W * s) for constant W and s.

    `old` is the multiply as typed before rewriting (use counts and types
    refer to it); `call` is the same multiply with rewritten children.
    """
    if call.op is not elemwise.multiply:
        return None
    for k in (0, 1):
        prod, scale = call.args[k], call.args[1 - k]
        if not isinstance(prod, Call) or not isinstance(scale, Constant) or uses.get(id(old.args[k]), 0) != 1:
            continue
        out = old.args[k].checked_type
        if not isinstance(out, TensorType) or len(prod.args) != 2 or not isinstance(prod.args[1], Constant):
            continue
        if old.checked_type != out:
            continue  # the multiply broadcasts beyond the product's shape
        weight = prod.args[1].data
        if prod.op in _CONVS:
            vec = _channel_vector(scale, out, 1)
            if vec is None:
                continue
            new_w = weight * vec.reshape((-1,) + (1,) * (weight.ndim - 1))
        elif prod.op is mm_ops.dense:
            vec = _channel_vector(scale, out, out.ndim - 1)
            if vec is None:
                continue
            new_w = weight * vec[:, None]
        elif prod.op is mm_ops.matmul and weight.ndim >= 2 and out.ndim >= 2:
            vec = _channel_vector(scale, out, out.ndim - 1)
            if vec is None:
                continue
            new_w = weight * vec
        else:
            continue
        return Call(prod.op, (prod.args[0], Constant(new_w.astype(weight.dtype))), prod.attrs)
    return None


def simplify_expr(func: Function, mod: IRModule | None = None) -> Function:
    func = infer_expr(func, mod)  # type: ignore[assignment]

    def expand(old: Expr, new: Expr) -> Expr | None:
        if isinstance(new, Call) and new.op is norm_ops.batch_norm:
            return _expand_batch_norm(old, new)  # type: ignore[arg-type]
        return None

    func = infer_expr(fold_expr(infer_expr(rewrite(func, expand), mod)), mod)  # type: ignore[assignment]
    uses: dict[int, int] = {}
    for node in post_order(func):
        for child in children(node):
            uses[id(child)] = uses.get(id(child), 0) + 1

    def fold(old: Expr, new: Expr) -> Expr | None:
        if isinstance(old, Call) and isinstance(new, Call):
            return _fold_scale(old, new, uses)
        return None

    return infer_expr(rewrite(func, fold), mod)  # type: ignore[return-value]


class SimplifyInference(FunctionPass):
    name = "SimplifyInference"
    opt_level = 0

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return simplify_expr(func, mod)


class DenseToMatmul(FunctionPass):
    """dense(x, w) -> matmul(x, transpose(w)): the transposed weight is folded
    at compile time and the kernel then streams contiguous rows."""

    name = "DenseToMatmul"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        from ..op import transform as tf

        def visit(old: Expr, new: Expr) -> Expr | None:
            if isinstance(new, Call) and new.op is mm_ops.dense:
                return mm_ops.matmul(new.args[0], tf.transpose(new.args[1], axes=(1, 0)))
            return None

        out = rewrite(func, visit)
        return infer_expr(fold_expr(infer_expr(out, mod)), mod)  # type: ignore[return-value]
