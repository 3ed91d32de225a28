"""FoldConstant: evaluate operator calls whose inputs are all constants.

Calls whose result has no element become empty constants, whatever their
inputs.

Evaluation uses each operator's NumPy reference, so folding never needs a C
compiler. Typical wins: shape computations of exported models, transposed
or rescaled weights (see SimplifyInference and DenseToMatmul).

One call is left alone: widening a float16/bfloat16 tensor constant (a
weight) to float32. Folding it would store the weight at twice its size; the
kernel converts it as it reads it instead. A caller that needs the value
itself (the importer, for a compile-time constant) passes
`keep_narrow_weights=False`.
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..op.elemwise import cast
from ..op.registry import Op
from ..relay.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import rewrite
from .infer_type import infer_function
from .pass_infra import FunctionPass, PassContext


def _widens_narrow_weight(call: Call) -> bool:
    """A cast of a float16/bfloat16 constant tensor (not a scalar) to a wider type."""
    if call.op is not cast or not isinstance(call.args[0], Constant):
        return False
    data = np.asarray(call.args[0].data)
    return data.size > 1 and dt.is_supported(data.dtype.name) and dt.is_storage_only(data.dtype.name)


def _evaluate(call: Call, ty: object, keep_narrow_weights: bool) -> Expr | None:
    op = call.op
    if not isinstance(op, Op) or not op.foldable:
        return None
    if keep_narrow_weights and _widens_narrow_weight(call):
        return None
    if isinstance(ty, TensorType) and 0 in ty.shape:
        # a result with no element is known whatever the inputs: no kernel, nothing to evaluate
        # (NumPy references such as a max over an empty array would raise)
        return Constant(np.zeros(ty.shape, dtype=dt.to_numpy(ty.dtype)))
    constants = [a for a in call.args if isinstance(a, Constant)]
    if len(constants) != len(call.args):
        return None
    args = [np.asarray(c.data) for c in constants]
    value = op.reference(args, call.attrs)
    if isinstance(value, tuple):
        return Tuple(tuple(Constant(np.asarray(v)) for v in value))
    return Constant(np.asarray(value))


def fold_expr(expr: Expr, keep_narrow_weights: bool = True) -> Expr:
    """Fold constant sub-expressions of `expr` (types are re-inferred)."""

    def visit(old: Expr, new: Expr) -> Expr | None:
        if isinstance(new, Function) and new.attrs.primitive:
            return None  # fused kernels keep their inlined scalars as they are
        if isinstance(new, Call):
            folded = _evaluate(new, old.checked_type_, keep_narrow_weights)
            if folded is not None:
                # keep the dtype the type relation promised
                ty = old.checked_type_
                if isinstance(folded, Constant) and isinstance(ty, TensorType):
                    data = folded.data
                    if data.dtype.name != ty.dtype or data.shape != ty.shape:
                        folded = Constant(np.asarray(data, dtype=dt.to_numpy(ty.dtype)).reshape(ty.shape))
                return folded
        if isinstance(new, TupleGetItem) and isinstance(new.tuple_value, Tuple):
            return new.tuple_value.fields[new.index]
        return None

    return rewrite(expr, visit, into_functions=False)


class FoldConstant(FunctionPass):
    name = "FoldConstant"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        typed = infer_function(func, mod)
        folded = fold_expr(typed)
        return infer_function(folded, mod)
