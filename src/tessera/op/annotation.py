"""Annotation operators used by partitioning: they mark, they never compute.

`compiler_begin(x)` / `compiler_end(y)` delimit a region of calls that one
accelerator will run (AnnotateTarget, MergeCompilerRegions); PartitionGraph
removes them. `on_target(x)` pins the call producing `x` to a named target
(or to "host" to keep it off every accelerator).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..relay.expr import Call, Expr
from ..relay.ty import Type
from .registry import OpPattern, register_op


@dataclass(frozen=True)
class CompilerAttrs:
    compiler: str


@dataclass(frozen=True)
class OnTargetAttrs:
    target: str


def _identity_type(types: tuple[Type, ...], attrs: object) -> Type:
    return types[0]


def _identity_ref(args, attrs):
    return args[0]


compiler_begin = register_op("annotation.compiler_begin", type_rel=_identity_type, reference=_identity_ref,
                             pattern=OpPattern.OPAQUE, attrs=CompilerAttrs, num_inputs=1)
compiler_end = register_op("annotation.compiler_end", type_rel=_identity_type, reference=_identity_ref,
                           pattern=OpPattern.OPAQUE, attrs=CompilerAttrs, num_inputs=1)
on_target_op = register_op("annotation.on_target", type_rel=_identity_type, reference=_identity_ref,
                           pattern=OpPattern.OPAQUE, attrs=OnTargetAttrs, num_inputs=1)

HOST = "host"


def on_target(expr: Expr, target: str) -> Call:
    """Pin the call that computes `expr` to the target (or sub-target piece) named `target`."""
    return on_target_op(expr, target=target)
