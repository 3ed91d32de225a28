"""Lowering partition functions to PrimFuncs: the shared part of a RelayToTIR hook.

A target that calls a library from generated TIR says, per composite of its
pattern table, how the composite's anchor call (the conv, the matmul)
becomes tensor expressions, usually one `te.extern` stage; the composite's
other calls (a bias add, an activation) keep their operators' ordinary
computes, so `te.lower` fuses them like any kernel's stages. Each rule gets
the `Match` of its pattern on the composite's body, so it finds nodes by
the pattern objects (`m[CONV].attrs`), as the pattern table's checks do.

    LOWERINGS = [Lowering(CONV_ENTRY, CONV, conv_by_sgemm)]
    kind.set_attr(RELAY_TO_TIR, LowerPartitions("blas", LOWERINGS))
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .. import te
from ..errors import CompileError, format_choices
from ..op.registry import Op
from ..op.schedule_context import ScheduleContext
from ..relay.dataflow_pattern import Match, Pattern
from ..relay.expr import Call, Expr, Function, Tuple, TupleGetItem
from ..relay.module import IRModule
from ..relay.pattern_table import PatternEntry
from ..relay.ty import TensorType
from ..relay.visitor import post_order
from ..target.target import Target
from ..tir.stmt import PrimFunc
from ..transform.pass_infra import Pass, PassContext
from .target_hooks import TARGET_ATTR

Rule = Callable[[Match, list[te.Tensor]], te.Tensor]  # (match, the anchor's argument tensors) -> its value


@dataclass(frozen=True)
class Lowering:
    """How calls of the composite `entry.name` lower: the call `anchor` matched by `rule`, the rest by their ops."""

    entry: PatternEntry
    anchor: Pattern
    rule: Rule


Value = te.Tensor | tuple  # a tensor, or a tuple of values


def lower_partition(func: Function, symbol: str, target: Target, lowerings: Sequence[Lowering],
                    sched: ScheduleContext | None = None) -> PrimFunc:
    """A partition function -> one PrimFunc named `symbol`, marked for `target`'s code generator.

    Calls no rule covers use their ops' computes, scheduled by `sched` (default: `target`'s defaults)."""
    sched = sched or ScheduleContext(target)
    inputs = []
    env: dict[int, Value] = {}
    for k, p in enumerate(func.params):
        ty = p.checked_type
        if not isinstance(ty, TensorType):
            raise CompileError(f"partition {symbol}: parameter %{p.name_hint} has non-tensor type {ty}")
        inputs.append(te.placeholder(ty.shape, ty.dtype, f"p{k}"))
        env[id(p)] = inputs[-1]
    result = _lower(func.body, env, {lowering.entry.name: lowering for lowering in lowerings}, symbol, sched)
    return te.lower(symbol, inputs, list(_flatten(result)), {TARGET_ATTR: target})


def _lower(body: Expr, env: dict[int, Value], lowerings: dict[str, Lowering], symbol: str, sched: ScheduleContext,
           rules: Mapping[int, Callable[[list[te.Tensor]], te.Tensor]] | None = None) -> Value:
    """`body`'s value from `env` (its free variables'); `rules` lower particular calls (by id)."""
    rules = rules or {}
    for node in post_order(body, into_functions=False):
        if id(node) in env or isinstance(node, Function):
            continue
        if isinstance(node, Call) and isinstance(node.op, Function):
            composite = node.op
            name = composite.attrs.composite
            if name not in lowerings:
                raise CompileError(f"partition {symbol}: no lowering for composite {name!r}; "
                                   f"known: {format_choices(lowerings) or 'none'}")
            inner = lowerings[name]
            found = inner.entry.pattern.match(composite.body)
            if found is None:
                raise CompileError(f"partition {symbol}: composite {name!r} no longer matches its pattern")
            local = {id(p): env[id(a)] for p, a in zip(composite.params, node.args)}
            anchor = found.get(inner.anchor)  # None: an alternative without it matched
            here = {} if anchor is None else {id(anchor): functools.partial(inner.rule, found)}
            env[id(node)] = _lower(composite.body, local, lowerings, symbol, sched, here)
        elif isinstance(node, Call) and isinstance(node.op, Op):
            args = [env[id(a)] for a in node.args]
            if id(node) in rules:
                tensors = [a for a in args if isinstance(a, te.Tensor)]
                if len(tensors) != len(args):
                    raise CompileError(f"partition {symbol}: {node.op.name} takes a tuple; a rule gets tensors only")
                env[id(node)] = rules[id(node)](tensors)
            elif node.op.compute is None:
                raise CompileError(f"partition {symbol}: operator {node.op.name} has no TE compute")
            else:
                env[id(node)] = node.op.compute(args, node.attrs, node.checked_type, sched)
        elif isinstance(node, Tuple):
            env[id(node)] = tuple(env[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            fields = env[id(node.tuple_value)]
            assert isinstance(fields, tuple)
            env[id(node)] = fields[node.index]
        else:
            raise CompileError(f"partition {symbol}: cannot lower {type(node).__name__} (constants stay "
                               "parameters unless the kind binds them)")
    return env[id(body)]


def _flatten(value: Value) -> Iterator[te.Tensor]:
    if isinstance(value, tuple):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


class LowerPartitions(Pass):
    """A RelayToTIR hook: every partition for `kind` becomes a PrimFunc of the same name."""

    name = "LowerPartitions"
    opt_level = 0

    def __init__(self, kind: str, lowerings: Sequence[Lowering]) -> None:
        self.kind = kind
        self.lowerings = tuple(lowerings)

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        result = mod
        for gv, func in mod.items():
            if isinstance(func, Function) and func.attrs.compiler == self.kind:
                target = func.attrs.target
                if not isinstance(target, Target):
                    raise CompileError(f"partition @{gv.name_hint} for {self.kind!r} names no target "
                                       "(PartitionGraph sets it from the build's targets)")
                sched = ScheduleContext.for_build(target, ctx.config)
                result = result.with_function(gv, lower_partition(func, gv.name_hint, target, self.lowerings, sched))
        return result
