"""SimplifyInference: inference-time algebra on trained models.

1. `batch_norm` becomes a per-channel multiply and add.
2. Constant multiplies and adds are reassociated towards the product they
   follow (`(x + b) * s -> x * s + b * s`, adjacent constant adds merged), so
   an affine layer written out by hand (`Mul` + `Add` after a conv) folds too.
3. A per-channel multiply after a convolution or matrix product whose weight
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
from .infer_type import infer_expr, infer_function
from .pass_infra import FunctionPass, PassContext

_CONVS = set(conv_ops.CONV_BY_RANK.values())


def _expand_batch_norm(old: Call, call: Call) -> Expr:
    """`call` (children rewritten) as multiply-add; types come from `old`."""
    x, gamma, beta, mean, var = call.args
    attrs = call.attrs_as(norm_ops.BatchNormAttrs)
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


def _use_counts(func: Function) -> dict[int, int]:
    uses: dict[int, int] = {}
    for node in post_order(func):
        for child in children(node):
            uses[id(child)] = uses.get(id(child), 0) + 1
    return uses


def _constant_operand(call: Call) -> tuple[int, Constant] | None:
    """(index of the other operand, the constant) for a call with one constant operand."""
    a, b = call.args
    if isinstance(b, Constant) and not isinstance(a, Constant):
        return 0, b
    if isinstance(a, Constant) and not isinstance(b, Constant):
        return 1, a
    return None


def _reassociate(old: Expr, new: Expr, uses: dict[int, int]) -> Expr | None:
    """Gather per-channel constants next to the product that can absorb them.

    (x + b) * s -> x * s + b * s       (so a following fold reaches the conv)
    (x * s1) * s2 -> x * (s1 * s2)
    (x + b1) + b2 -> x + (b1 + b2)
    Only when the inner call has no other reader, so nothing is computed twice.
    """
    if not (isinstance(old, Call) and isinstance(new, Call)  # `new` is `old` with its children rewritten
            and new.op in (elemwise.multiply, elemwise.add) and len(new.args) == 2):
        return None
    outer = _constant_operand(new)
    if outer is None:
        return None
    k, c = outer
    inner_old, inner = old.args[k], new.args[k]
    if not isinstance(inner, Call) or uses.get(id(inner_old), 0) != 1 or len(inner.args) != 2:
        return None
    inner_const = _constant_operand(inner)
    if inner_const is None:
        return None
    j, d = inner_const
    x = inner.args[j]
    if new.op is elemwise.multiply and inner.op is elemwise.add:
        return elemwise.add(elemwise.multiply(x, c), Constant(np.asarray(d.data * c.data, dtype=d.data.dtype)))
    if new.op is inner.op:
        combined = d.data * c.data if new.op is elemwise.multiply else d.data + c.data
        return Call(new.op, (x, Constant(np.asarray(combined, dtype=d.data.dtype))), new.attrs)
    return None


def simplify_expr(func: Function, mod: IRModule | None = None) -> Function:
    func = infer_function(func, mod)

    def expand(old: Expr, new: Expr) -> Expr | None:
        if isinstance(old, Call) and isinstance(new, Call) and new.op is norm_ops.batch_norm:
            return _expand_batch_norm(old, new)
        return None

    func = infer_function(fold_expr(infer_expr(rewrite(func, expand), mod)), mod)
    uses = _use_counts(func)
    func = infer_function(rewrite(func, lambda old, new: _reassociate(old, new, uses)), mod)
    uses = _use_counts(func)

    def fold(old: Expr, new: Expr) -> Expr | None:
        if isinstance(old, Call) and isinstance(new, Call):
            return _fold_scale(old, new, uses)
        return None

    func = infer_function(rewrite(func, fold), mod)
    uses = _use_counts(func)  # the folds leave bias adds next to each other: merge them
    return infer_function(rewrite(func, lambda old, new: _reassociate(old, new, uses)), mod)


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
        return infer_function(fold_expr(infer_expr(out, mod)), mod)
