"""LowerTE: turn every primitive function into a PrimFunc in the same module.

Each operator contributes its TE compute; the fused group becomes one kernel.
Structurally identical groups (ResNet repeats the same block many times)
share one kernel, which keeps both the C file and gcc's time small.

Every compute is told how to schedule: LowerTE builds one ScheduleContext
per target it lowers for (the host, or each named piece), holding that
target and the tuning log of the build's PassContext, and passes it down.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from .. import te
from ..errors import CompileError
from ..op.registry import Op
from ..op.transform import ConcatAttrs
from ..op.schedule_context import ScheduleContext
from ..op.tuning_log import Config, Workload
from ..relay.expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var
from ..relay.module import IRModule
from ..relay.printer import expr_str
from ..relay.ty import TensorType
from ..relay.visitor import post_order, rewrite
from ..tir import expr as E
from ..tir.stmt import PrimFunc
from ..transform.infer_type import infer_expr, infer_function
from ..target.target import Target
from ..transform.pass_infra import Pass, PassContext
from ..codegen.c_source import OPTIMIZE_ATTR
from .kernel_flags import kernel_flags
from .target_hooks import DEVICE_ATTR, TARGET_ATTR

MAX_NAME_OPS = 4
FUSED_OPS_ATTR = "fused_ops"  # PrimFunc attribute: the operators the kernel computes, in order (for profiles)
# PrimFunc attribute of a kernel that only concatenates its parameters: (axis, the parameter index of each
# part in order); the memory plan may then place the parts in the result (backend/concat_views.py)
CONCAT_ATTR = "concat_parts"

Lowered = te.Tensor | tuple["Lowered", ...]  # what a Relay value of the kernel becomes: a tensor, or a tuple


def _constant_tensor(c: Constant) -> te.Tensor:
    if c.data.size != 1:
        raise CompileError(
            f"a primitive function holds a {c.data.shape} constant; only scalars may be inlined"
        )
    value = c.data.reshape(()).item()
    dtype = c.data.dtype.name
    return te.compute(c.data.shape, lambda *i: E.const(value, dtype), name="const")


def lower_primitive(func: Function, name: str, sched: ScheduleContext) -> PrimFunc:
    """One fused Relay function -> one PrimFunc named `name`; every op's compute is scheduled by `sched`."""
    inputs = []
    env: dict[int, Lowered] = {}
    for p in func.params:
        ty = p.checked_type
        if not isinstance(ty, TensorType):
            raise CompileError(f"kernel {name}: parameter %{p.name_hint} has non-tensor type {ty}")
        t = te.placeholder(ty.shape, ty.dtype, p.name_hint)
        env[id(p)] = t
        inputs.append(t)
    for node in post_order(func.body, into_functions=False):
        if id(node) in env:
            continue
        if isinstance(node, Constant):
            env[id(node)] = _constant_tensor(node)
        elif isinstance(node, Call) and isinstance(node.op, Op):
            op = node.op
            if op.compute is None:
                raise CompileError(f"operator {op.name} has no lowering to loops (no TE compute)")
            args = [env[id(a)] for a in node.args]
            env[id(node)] = op.compute(args, node.attrs, node.checked_type, sched)
        elif isinstance(node, Tuple):
            env[id(node)] = tuple(env[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            value = env[id(node.tuple_value)]
            if not isinstance(value, tuple):
                raise CompileError(f"kernel {name}: item {node.index} taken from a tensor, not a tuple")
            env[id(node)] = value[node.index]
        elif isinstance(node, Var):
            raise CompileError(f"kernel {name}: free variable %{node.name_hint}")
        else:
            raise CompileError(f"kernel {name}: cannot lower {type(node).__name__}")
    result = env[id(func.body)]
    outputs = list(_flatten(result))
    prim = te.lower(name, inputs, outputs)
    flags = kernel_flags(func, kernel_name_hint(func), sched)
    return prim.with_attrs(**{OPTIMIZE_ATTR: flags}) if flags else prim


def _flatten(value: Lowered) -> Iterator[te.Tensor]:
    if isinstance(value, tuple):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def fused_operators(func: Function) -> tuple[str, ...]:
    """The operators of a primitive function, in evaluation order (e.g. nn.conv2d, add, nn.relu)."""
    return tuple(n.op.name for n in post_order(func.body, into_functions=False)
                 if isinstance(n, Call) and isinstance(n.op, Op))


def concat_parts(func: Function) -> tuple[int, tuple[int, ...]] | None:
    """(axis, the parameter index of each part) when `func` is nothing but a concatenation of distinct
    parameters, else None."""
    body = func.body
    if not (isinstance(body, Call) and isinstance(body.op, Op) and body.op.name == "concatenate"):
        return None
    index = {id(p): k for k, p in enumerate(func.params)}
    parts = [index.get(id(a), -1) for a in body.args]
    if -1 in parts or len(set(parts)) != len(parts) or len(parts) != len(func.params):
        return None
    return body.attrs_as(ConcatAttrs).axis, tuple(parts)  # the axis as written (negative counts from the end)


def kernel_name_hint(func: Function) -> str:
    names = [name.split(".")[-1] for name in fused_operators(func)]
    return "fused_" + "_".join(names[:MAX_NAME_OPS])


class LowerTE(Pass):
    """Lower `main`'s primitive-function calls into calls of PrimFuncs.

    `target` builds the kernels outside named pieces, `pieces` (named
    compilation) those placed on a piece; schedule defaults depend on it.
    `forced`: schedule configurations imposed per workload (the tuner's
    candidates), ahead of the tuning log.
    """

    name = "LowerTE"
    opt_level = 0

    def __init__(self, target: Target, prefix: str = "tsgen_default_", pieces: Mapping[str, Target] | None = None,
                 forced: Mapping[Workload, Config] | None = None) -> None:
        self.target = target
        self.prefix = prefix
        self.pieces = pieces or {}  # named compilation: piece -> the target that builds its kernels
        self.forced = forced or {}

    def schedules(self, ctx: PassContext) -> dict[str | None, ScheduleContext]:
        """The schedule context of each piece's kernels (None: kernels outside named pieces)."""
        host = ScheduleContext.for_build(self.target, ctx.config, self.forced)  # reads the log once
        return {None: host, **{name: replace(host, target=piece) for name, piece in self.pieces.items()}}

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        schedules = self.schedules(ctx)
        main_gv = mod.get_global_var("main")
        main = infer_expr(mod.main, mod)
        kernels: dict[str, GlobalVar] = {}  # printed function -> kernel
        new_mod = mod
        used_names: set[str] = {gv.name_hint for gv in mod}

        def visit(old: Expr, new: Expr) -> Expr | None:
            nonlocal new_mod
            if not (isinstance(new, Call) and isinstance(new.op, Function) and new.op.attrs.primitive):
                return None
            assert isinstance(old, Call) and isinstance(old.op, Function)
            func = old.op  # typed
            if func.attrs.compiler:
                return None  # owned by an external code generator
            device = func.attrs.extra.get(DEVICE_ATTR)
            assert device is None or isinstance(device, str)  # a piece name (PlanDevices)
            key = f"{device}\n{expr_str(func)}"  # the same kernel on two pieces is two kernels
            gv = kernels.get(key)
            if gv is None:
                base = self.prefix + kernel_name_hint(func)
                name, k = base, 1
                while name in used_names:
                    name = f"{base}_{k}"
                    k += 1
                used_names.add(name)
                prim = lower_primitive(func, name, schedules[device]).with_attrs(
                    **{FUSED_OPS_ATTR: fused_operators(func)})
                parts = concat_parts(func)
                if parts is not None:
                    prim = prim.with_attrs(**{CONCAT_ATTR: parts})
                if device is not None:
                    prim = prim.with_attrs(**{TARGET_ATTR: self.pieces[device], DEVICE_ATTR: device})
                gv = GlobalVar(name)
                new_mod = new_mod.with_function(gv, prim)
                kernels[key] = gv
            return Call(gv, new.args)

        lowered = rewrite(main, visit, into_functions=False)
        assert isinstance(lowered, Function)  # a rewrite of a function is one
        new_mod = new_mod.with_function(main_gv, lowered)
        return new_mod.with_function(main_gv, infer_function(new_mod.main, new_mod))
