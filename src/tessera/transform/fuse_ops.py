"""FuseOps: group operator calls into primitive functions (future kernels).

Walking from the inputs towards the outputs, a call joins the group of a
producer whose only consumer it is, when the pair composes:

* elementwise/broadcast/injective after an injective group (one loop nest);
* a reduction after an injective group (inlined into the reduction's reads);
* elementwise/broadcast after a convolution, matmul (out-elementwise-
  fusable) or reduction group: the group's epilogue.

Calls placed on different pieces of a named compilation (PlanDevices) never
share a group; each primitive function records its piece.

Each group has one output, so the result cannot create a cycle. Scalar
constants are copied into the kernels that use them (they become immediates
in the C code); other constants stay arguments, i.e. graph parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..op.registry import Op, OpPattern
from ..relay.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var, children
from ..relay.module import IRModule
from ..relay.ty import TupleType
from ..relay.visitor import post_order
from .infer_type import infer_function
from .pass_infra import FunctionPass, PassContext
from .plan_devices import device_attrs, take_placement

INLINE_CONSTANT_ELEMENTS = 1


@dataclass
class _Group:
    root: Call
    members: list[Call] = field(default_factory=list)
    anchor: OpPattern = OpPattern.ELEMWISE
    device: str | None = None  # the piece of a named compilation that runs it


def _can_extend(group: _Group, consumer: OpPattern) -> bool:
    """May a consumer of `group`'s output join the group?"""
    if consumer == OpPattern.OPAQUE or group.anchor == OpPattern.OPAQUE:
        return False
    if isinstance(group.root.checked_type, TupleType):
        return False  # tuple-valued groups (split) are closed
    if group.anchor in (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.COMM_REDUCE):
        return consumer <= OpPattern.BROADCAST  # an epilogue
    if group.anchor <= OpPattern.INJECTIVE:
        return consumer <= OpPattern.INJECTIVE or consumer == OpPattern.COMM_REDUCE
    return False


def _is_op_call(e: Expr) -> bool:
    return isinstance(e, Call) and isinstance(e.op, Op)


def plan_groups(body: Expr, allow_fusion: bool = True,
                device_of: Mapping[int, str] | None = None) -> dict[int, _Group]:
    """Map id(call) -> its group, for every operator call in `body`.

    Producers come first: each call joins the group of at most one producer
    (the one with the strongest anchor, e.g. the convolution of a residual
    add), provided that producer's only consumer is this call.
    """
    device_of = device_of or {}
    nodes = post_order(body, into_functions=False)
    consumers: dict[int, int] = {id(body): 1}
    for node in nodes:
        for child in children(node):
            consumers[id(child)] = consumers.get(id(child), 0) + 1
    groups: dict[int, _Group] = {}
    for node in nodes:
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            continue
        pattern = node.op.pattern
        target = None
        device = device_of.get(id(node))
        if allow_fusion:
            candidates = [
                groups[id(a)] for a in node.args
                if id(a) in groups and groups[id(a)].root is a and consumers.get(id(a), 0) == 1
                and groups[id(a)].device == device and _can_extend(groups[id(a)], pattern)
            ]
            if candidates:
                target = max(candidates, key=lambda g: g.anchor)
        if target is None:
            target = _Group(node, device=device)
        target.members.append(node)
        target.root = node
        target.anchor = max(target.anchor, pattern)
        groups[id(node)] = target
    return groups


def _inline_constant(e: Expr) -> bool:
    return isinstance(e, Constant) and 0 < e.data.size <= INLINE_CONSTANT_ELEMENTS


def _outline(group: _Group, rebuilt: dict[int, Expr]) -> Call:
    """A call of a new primitive function computing `group.root`."""
    member_ids = {id(m) for m in group.members}
    params: list[Var] = []
    args: list[Expr] = []
    param_of: dict[int, Var] = {}
    local: dict[int, Expr] = {}
    for member in group.members:  # producers first
        new_args = []
        for a in member.args:
            if id(a) in member_ids:
                new_args.append(local[id(a)])
            elif _inline_constant(a):
                new_args.append(a)
            else:
                if id(a) not in param_of:
                    ty = a.checked_type
                    param_of[id(a)] = Var(f"p{len(params)}", ty)
                    params.append(param_of[id(a)])
                    args.append(rebuilt[id(a)])
                new_args.append(param_of[id(a)])
        local[id(member)] = Call(member.op, tuple(new_args), member.attrs)
    func = Function(tuple(params), local[id(group.root)], attrs=device_attrs(group.device))
    return Call(func, tuple(args))


def fuse_function(func: Function, mod: IRModule | None = None, allow_fusion: bool = True) -> Function:
    """`func` with every operator call inside a primitive function.

    With `allow_fusion=False` each call gets a function of its own.
    """
    func = infer_function(func, mod)
    body, device_of = take_placement(func.body)
    groups = plan_groups(body, allow_fusion, device_of)
    rebuilt: dict[int, Expr] = {}
    for node in post_order(body, into_functions=False):
        if _is_op_call(node):
            group = groups[id(node)]
            if group.root is node:
                rebuilt[id(node)] = _outline(group, rebuilt)
            continue
        kids = children(node)
        if not kids or isinstance(node, Function):
            rebuilt[id(node)] = node
        elif isinstance(node, Tuple):
            rebuilt[id(node)] = Tuple(tuple(rebuilt[id(k)] for k in kids))
        elif isinstance(node, TupleGetItem):
            rebuilt[id(node)] = TupleGetItem(rebuilt[id(node.tuple_value)], node.index)
        elif isinstance(node, Call):
            # a called Function or GlobalVar is a leaf of this walk, kept as it is
            rebuilt[id(node)] = Call(node.op, tuple(rebuilt[id(a)] for a in node.args), node.attrs)
        else:
            raise NotImplementedError(f"FuseOps: unexpected {type(node).__name__} in a dataflow graph")
    new = Function(func.params, rebuilt[id(body)], func.ret_type, func.attrs)
    return infer_function(new, mod)


class FuseOps(FunctionPass):
    name = "FuseOps"
    opt_level = 0

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if func.attrs.primitive or func.attrs.compiler:
            return func
        # opt level 0 keeps one kernel per operator (handy when debugging)
        return fuse_function(func, mod, allow_fusion=ctx.opt_level >= 1)
