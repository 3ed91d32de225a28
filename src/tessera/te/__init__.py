"""Tensor expressions: compute definitions (and extern calls) that lower to TIR loop nests."""

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
from .extern import ExternOp, axis, call_extern, extern, loop_nest, pointer, serial_loops
from .lower import lower

__all__ = [
    "Check", "Combiner", "ComputeOp", "ExternOp", "IterKind", "IterVar", "PlaceholderOp", "Reduce", "Tensor",
    "argmax", "argmin", "axis", "call_extern", "check", "compute", "extern", "loop_nest", "lower", "max_reduce",
    "min_reduce", "placeholder", "pointer", "prod", "reduce_axis", "serial_loops", "sum",
]
