"""float16 and bfloat16 tensors of an ONNX model, computed in float32.

tessera stores float16/bfloat16 (graph inputs and outputs, weights, Cast
results) but computes in float32, as onnxruntime's CPU provider does for
most operators: it casts to float32 around them. The importer does the same
at the graph's edges, so no converter ever sees a 16-bit float:

* a graph input or weight of a 16-bit type is widened to float32 where it
  enters (the weight stays 16-bit in the parameters: FoldConstant leaves
  the widening to the kernel, see transform/fold_constant.py);
* a value a node makes in a 16-bit type (a Cast to float16, a float16
  Constant) is widened the same way;
* a float32 result computed from 16-bit inputs is rounded to the 16-bit type
  (and widened again): the tensor between two operators has that type, and
  ONNX's reference rounds there. (onnxruntime may not: where it lacks
  float16 kernels it casts around a chain of operators and drops the casts
  inside, so its results can be more precise by float16 rounding.)
  Operators that only move or select values skip the rounding;
* a graph output, or a value handed to onnxruntime (the fallback), is
  narrowed back to its type.

`Node.stored_dtype(k)` tells a converter the 16-bit type an input has in
the model (CastLike needs it); `ImportContext.dtype_of` gives the type it is
computed in.
"""

from __future__ import annotations

from collections.abc import Sequence

from ... import dtype as dt
from ...op import elemwise as ew
from ...relay.expr import Call, Expr
from ...relay.ty import TensorType

COMPUTE_DTYPE = "float32"

# Operators whose results are values of their inputs (moved, selected, or
# rounded to integers, which a 16-bit float holds): no rounding needed.
EXACT_OPS = frozenset({
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Concat", "Split",
    "Slice", "Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "DepthToSpace", "SpaceToDepth",
    "ReverseSequence", "Trilu", "Where", "Dropout", "Max", "Min", "Relu", "Neg", "Abs", "Sign", "Floor", "Ceil",
    "Round", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "TopK",
})

# Operators whose result type is named explicitly, not taken from their inputs
TYPED_OPS = frozenset({"Cast", "CastLike"})
# Outputs of a type an attribute names (LayerNormalization's mean and inverse deviation: `stash_type`)
TYPED_OUTPUTS: dict[str, frozenset[int]] = {"LayerNormalization": frozenset({1, 2})}


def widen(value: Expr) -> Expr:
    return ew.cast(value, dtype=COMPUTE_DTYPE)


def narrow(value: Expr, stored: str) -> Expr:
    widened = value.args[0] if isinstance(value, Call) and value.op is ew.cast else None
    if widened is not None and isinstance(widened.checked_type_, TensorType) and widened.checked_type_.dtype == stored:
        return widened  # narrowing what was just widened: the 16-bit value itself
    return ew.cast(value, dtype=stored)


def round_to(value: Expr, stored: str) -> Expr:
    """`value` rounded to the 16-bit type `stored`, in float32."""
    return widen(narrow(value, stored))


def settle(value: Expr, dtype: str, op_type: str, output: int,
           input_storage: Sequence[str]) -> tuple[Expr, str | None]:
    """What later nodes see of output `output` of a converter, of `dtype`, and its stored 16-bit type (None
    if not 16-bit). `input_storage` holds the 16-bit types of the node's inputs."""
    if dt.is_storage_only(dtype):
        return widen(value), dtype
    typed = op_type in TYPED_OPS or output in TYPED_OUTPUTS.get(op_type, ())
    if dtype != COMPUTE_DTYPE or not input_storage or typed:
        return value, None
    stored = input_storage[0]
    return (value if op_type in EXACT_OPS else round_to(value, stored)), stored


__all__ = ["COMPUTE_DTYPE", "EXACT_OPS", "narrow", "round_to", "settle", "widen"]
