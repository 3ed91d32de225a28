"""AnnotateTarget: mark the calls each accelerator will run.

A call is offered to the accelerators in order; the first that supports it
(a composite from its pattern table, or an operator its kind lists as
supported) gets it: the call's inputs are wrapped in `compiler_begin` and
its result in `compiler_end`. A call pinned with `on_target(x, name)` goes
to that target (or stays on the host for "host"), overriding the choice.
An operator call no accelerator takes is noted on the module with the
reason (see declines.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import TesseraError, did_you_mean, format_choices
from ..op.annotation import HOST, OnTargetAttrs, compiler_begin, compiler_end, on_target_op
from ..op.registry import Op
from ..relay.expr import Call, Expr, Function
from ..relay.module import IRModule
from ..relay.visitor import rewrite
from ..target.target import Target
from .declines import Declined, Refusal, callable_name, note, with_declined
from .infer_type import infer_function
from .pass_infra import FunctionPass, PassContext

def supports(target: Target, call: Call) -> bool:
    """Does `target` take this call (a composite of its table, or a listed op)?"""
    if isinstance(call.op, Function) and call.op.attrs.composite:
        names = {e.name for e in target.kind.pattern_table}
        return call.op.attrs.composite in names
    if isinstance(call.op, Op):
        rule = target.kind.supported_ops.get(call.op.name)
        return bool(rule(call)) if callable(rule) else bool(rule)
    return False


def refusal(target: Target, call: Call) -> tuple[Refusal, str]:
    """Why `target` does not take an operator call (one it does not support)."""
    name = call.op.name if isinstance(call.op, Op) else "?"
    rule = target.kind.supported_ops.get(name)
    if callable(rule):
        return Refusal.RULE, f"{target.kind.name}'s rule {callable_name(rule)} for {name} refused the call"
    return Refusal.NO_RULE, f"no pattern or operator rule of {target.kind.name} takes {name}"


def _pin_name(pin: Call) -> str:
    """The target (or "host") an `on_target` call names."""
    return pin.attrs_as(OnTargetAttrs).target


class AnnotateTarget(FunctionPass):
    name = "AnnotateTarget"
    opt_level = 0

    def __init__(self, targets: Sequence[Target]) -> None:
        self.targets = list(targets)

    def choose(self, call: Call, pin: str | None) -> Target | None:
        names = [t.kind.name for t in self.targets]
        if pin is not None:
            if pin == HOST or pin not in names:
                return None  # pinned elsewhere: another partitioning round, or the host
            target = self.targets[names.index(pin)]
            if not supports(target, call):
                op = call.op.attrs.composite if isinstance(call.op, Function) else getattr(call.op, "name", "?")
                raise TesseraError(
                    f"a call of {op} is pinned to target {pin!r}, which does not support it"
                )
            return target
        return next((t for t in self.targets if supports(t, call)), None)

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        notes: list[Declined] = []
        result = mod
        for gv, func in mod.items():
            if isinstance(func, Function):
                new = self.transform_function(func, mod, ctx, notes)
                if new is not func:
                    result = result.with_function(gv, new)
        return with_declined(result, notes)

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext,
                           notes: list[Declined] | None = None) -> Function:
        """`func` annotated; the operator calls no target takes are appended to `notes`."""
        notes = [] if notes is None else notes
        if func.attrs.compiler or func.attrs.primitive:
            return func
        names = {t.kind.name for t in self.targets}
        # pins by the id of the call they wrap (as it is before rewriting)
        pins = {id(c.args[0]): _pin_name(c) for c in _pin_calls(func)}

        def visit(old: Expr, new: Expr) -> Expr | None:
            if isinstance(new, Call) and new.op is on_target_op:
                # consumed by the round that owns the target; host pins stay for later rounds
                return new.args[0] if _pin_name(new) in names else None
            if not isinstance(new, Call) or new.op in (compiler_begin, compiler_end):
                return None
            if not (isinstance(new.op, Op) or (isinstance(new.op, Function) and new.op.attrs.composite)):
                return None
            pin = pins.get(id(old))
            target = self.choose(new, pin)
            if target is None:
                typed = old if isinstance(old, Call) else new  # (the rebuilt call's inputs have no types yet)
                if isinstance(new.op, Op) and pin is None:
                    notes.extend(d for t in self.targets for d in note(t.kind.name, [typed], *refusal(t, new)))
                elif isinstance(new.op, Op) and pin == HOST:
                    notes.extend(d for t in self.targets
                                 for d in note(t.kind.name, [typed], Refusal.PINNED, "pinned to the host"))
                return None
            name = target.kind.name
            args = tuple(compiler_begin(a, compiler=name) for a in new.args)
            return compiler_end(Call(new.op, args, new.attrs), compiler=name)

        return infer_function(rewrite(func, visit, into_functions=False), mod)


def _pin_calls(func: Function) -> list[Call]:
    from ..relay.visitor import post_order

    return [n for n in post_order(func, into_functions=False) if isinstance(n, Call) and n.op is on_target_op]


def check_pins(func: Function, valid: Sequence[str]) -> None:
    """Every pin must name a target of this build (or "host")."""
    for call in _pin_calls(func):
        pin = _pin_name(call)
        if pin not in valid:
            raise TesseraError(
                f"on_target pins a call to {pin!r}, which is not a target of this build"
                f"{did_you_mean(pin, valid)}; valid: {format_choices(valid)}"
            )


class RemovePins(FunctionPass):
    """Drop the on_target annotations left once every accelerator has partitioned."""

    name = "RemovePins"
    opt_level = 0

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if not _pin_calls(func):
            return func
        strip = rewrite(func, lambda old, new: new.args[0] if isinstance(new, Call) and new.op is on_target_op
                        else None, into_functions=False)
        return infer_function(strip, mod)
