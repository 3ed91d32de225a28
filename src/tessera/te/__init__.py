"""Tensor expressions: compute definitions that lower to TIR loop nests."""

from .tensor import (
    Check,
    Combiner,
    ComputeOp,
    IterKind,
    IterVar,
    PlaceholderOp,
    Reduce,
    Tensor,
    argmax,
    argmin,
    check,
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
    "Check", "Combiner", "ComputeOp", "IterKind", "IterVar", "PlaceholderOp", "Reduce", "Tensor",
    "argmax", "argmin", "check", "compute", "lower", "max_reduce", "min_reduce", "placeholder",
    "prod", "reduce_axis", "sum",
]
