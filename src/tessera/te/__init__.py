"""Tensor expressions: compute definitions that lower to TIR loop nests."""

from .tensor import (
    Combiner,
    ComputeOp,
    IterKind,
    IterVar,
    PlaceholderOp,
    Reduce,
    Tensor,
    argmax,
    argmin,
    compute,
    max_reduce,
    min_reduce,
    placeholder,
    prod,
    reduce_axis,
    sum,
)
from .lower import lower

__all__ = [
    "Combiner", "ComputeOp", "IterKind", "IterVar", "PlaceholderOp", "Reduce", "Tensor",
    "argmax", "argmin", "compute", "lower", "max_reduce", "min_reduce", "placeholder",
    "prod", "reduce_axis", "sum",
]
