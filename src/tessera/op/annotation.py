"""Annotation operators used by partitioning: they mark, they never compute.

`compiler_begin(x)` / `compiler_end(y)` delimit a region of calls that one
accelerator will run (AnnotateTarget, MergeCompilerRegions); PartitionGraph
removes them. `on_target(x)` pins the call producing `x` to a named target
(or to "host" to keep it off every accelerator).

`device_copy(x, src, dst)` is the one that computes: device planning inserts
it where a tensor moves between named pieces with different memories.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..relay.expr import Call, Expr
from .. import te
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


@dataclass(frozen=True)
class DeviceCopyAttrs:
    src: str  # piece that produced the tensor
    dst: str  # piece that reads the copy


device_copy_op = register_op(
    "device_copy", type_rel=_identity_type, reference=lambda args, a: args[0].copy(),
    pattern=OpPattern.OPAQUE,  # never fused: it is the boundary between two memories
    compute=lambda inputs, a, out, sched: te.compute(inputs[0].shape, lambda *i: inputs[0][i], name="copy"),
    attrs=DeviceCopyAttrs, num_inputs=1,
    doc="copy a tensor from the memory of piece `src` to that of piece `dst`",
)


def device_copy(expr: Expr, src: str, dst: str) -> Call:
    return device_copy_op(expr, src=src, dst=dst)
