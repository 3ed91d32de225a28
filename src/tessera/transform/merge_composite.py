"""MergeComposite: wrap each match of a pattern table in a composite function.

    table = [PatternEntry("blas.matmul", matmul_pattern), PatternEntry("blas.conv2d", conv_pattern, conv_ok)]
    mod = MergeComposite(table)(mod)

An entry's check gets the `Match` (see relay/pattern_table.py) of a
candidate, in the graph being rewritten, before anything is built.

A match becomes `Call(Function(params, body, composite=name), inputs)`:
what wildcards matched becomes parameters; constants the pattern matched
with `is_constant()` stay inside, so the target sees its weights. A match is
taken only if no intermediate value is also used outside it (otherwise the
value would have to exist twice). Earlier table entries win. A match
turned down (by its check, for the host's faster kernels, or for a value
read outside it) is noted on the module (see declines.py), so a report can
say why its calls stayed.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..relay.dataflow_pattern import (
    CallPattern, ConstantPattern, ExprPattern, Match, TupleGetItemPattern, TuplePattern, VarPattern,
    WildcardPattern,
)
from ..relay.expr import Call, Constant, Expr, FuncAttrs, Function, Tuple, TupleGetItem, Var, children
from ..relay.module import IRModule
from ..relay.pattern_table import PatternEntry, Refused, as_entries
from ..op.annotation import OnTargetAttrs, on_target, on_target_op
from ..relay.visitor import post_order, rebuild, rewrite, substitute
from ..target.target import Target
from .declines import Declined, Refusal, callable_name, note, op_calls, with_declined
from .infer_type import infer_function
from .pass_infra import FunctionPass, PassContext

_STRUCTURE = (CallPattern, TuplePattern, TupleGetItemPattern)
_INPUT = (WildcardPattern, VarPattern, ExprPattern)


def _split(match: Match) -> tuple[list[Expr], list[Expr]]:
    """(nodes inside the match, input nodes) in first-seen order."""
    inside: list[Expr] = []
    inputs: list[Expr] = []
    for pattern, expr in match.matched():
        if isinstance(pattern, _STRUCTURE) and isinstance(expr, (Call, Tuple, TupleGetItem)):
            inside.append(expr)
        elif isinstance(pattern, _INPUT) or (isinstance(pattern, ConstantPattern) and not isinstance(expr, Constant)):
            inputs.append(expr)
    inside_ids = {id(e) for e in inside}
    inputs = [e for e in dict.fromkeys(inputs) if id(e) not in inside_ids]
    return inside, inputs


def _composite_function(root: Expr, inside: list[Expr], inputs: list[Expr], name: str) -> Function:
    """The matched sub-graph as a function of its inputs (constants stay inside)."""
    params = [Var(f"{name.split('.')[-1]}_in{k}", e.checked_type) for k, e in enumerate(inputs)]
    local: dict[int, Expr] = {id(e): p for e, p in zip(inputs, params)}
    inside_ids = {id(e) for e in inside}
    for node in post_order(root, into_functions=False, is_leaf=lambda n: id(n) not in inside_ids):
        if id(node) in local:
            continue
        if id(node) not in inside_ids:
            local[id(node)] = node  # a constant kept inside
            continue
        kids = tuple(local[id(k)] for k in children(node) if not (isinstance(node, Call) and k is node.op))
        if isinstance(node, Call):
            local[id(node)] = Call(node.op, kids, node.attrs)
        elif isinstance(node, Tuple):
            local[id(node)] = Tuple(kids)
        elif isinstance(node, TupleGetItem):  # _split keeps no other kind of node inside
            local[id(node)] = TupleGetItem(kids[0], node.index)
    return infer_function(Function(tuple(params), local[id(root)], attrs=FuncAttrs(composite=name)))


def _pinned_targets(nodes: Sequence[Expr]) -> dict[int, str]:
    """The target each expression pinned among `nodes` is pinned to (`on_target`), by the expression's id."""
    return {id(n.args[0]): n.attrs_as(OnTargetAttrs).target for n in nodes
            if isinstance(n, Call) and n.op is on_target_op}


def merge_composite(func: Function, table: list[PatternEntry], mod: IRModule | None = None,
                    notes: list[Declined] | None = None, host: Target | None = None) -> Function:
    """`func` with each match of `table` wrapped; refused matches are appended to `notes`. With `host` (the
    target running the rest of the graph), a match whose entry finds the host faster is refused too, unless
    its call is pinned to the entry's target (`on_target`): the user's choice stands over a speed estimate."""
    notes = [] if notes is None else notes
    func = infer_function(func, mod)
    nodes = post_order(func.body, into_functions=False)
    uses: dict[int, int] = {id(func.body): 1}
    for n in nodes:
        for c in children(n):
            uses[id(c)] = uses.get(id(c), 0) + 1
    pins = _pinned_targets(nodes)
    claimed: set[int] = set()
    replacements: dict[int, tuple[Function, list[Expr]]] = {}
    for entry in table:
        for node in reversed(nodes):  # outputs first, so the largest match wins
            if id(node) in claimed or not isinstance(node, Call):
                continue
            match = entry.pattern.match(node)
            if match is None:
                continue
            inside, inputs = _split(match)
            if any(id(e) in claimed for e in inside):
                continue
            consumers_ok = all(
                e is node or uses.get(id(e), 0) == sum(
                    1 for m in inside for c in children(m) if c is e)
                for e in inside
            )
            target = entry.name.split(".")[0]
            if not consumers_ok:
                notes += note(target, op_calls(inside), Refusal.SHARED_VALUE,
                              f"pattern {entry.name} matched, but a value inside the match is also read outside it")
                continue
            verdict = True if entry.check is None else entry.check(match)
            if not verdict and entry.check is not None:
                why = (verdict.reason if isinstance(verdict, Refused)
                       else f"its check {callable_name(entry.check)} refused the match")
                notes += note(target, op_calls(inside), Refusal.CHECK, f"pattern {entry.name}: {why}")
                continue
            faster = (entry.host_faster(match, host)
                      if host is not None and entry.host_faster is not None and pins.get(id(node)) != target else None)
            if faster is not None:
                notes += note(target, op_calls(inside), Refusal.CHECK, f"pattern {entry.name}: {faster.reason}")
                continue
            composite = _composite_function(node, inside, inputs, entry.name)
            claimed |= {id(e) for e in inside}
            replacements[id(node)] = (composite, inputs)
    if not replacements:
        return func
    rebuilt: dict[int, Expr] = {}
    for node in nodes:
        if id(node) in replacements:
            composite, inputs = replacements[id(node)]
            rebuilt[id(node)] = Call(composite, tuple(rebuilt[id(e)] for e in inputs))
            continue
        kids = children(node)
        rebuilt[id(node)] = rebuild(node, tuple(rebuilt.get(id(k), k) for k in kids)) if kids else node
    new = Function(func.params, rebuilt[id(func.body)], func.ret_type, func.attrs)
    return infer_function(new, mod)


class MergeComposite(FunctionPass):
    name = "MergeComposite"
    opt_level = 0

    def __init__(self, table: Sequence[PatternEntry | tuple], host: Target | None = None) -> None:
        self.table = as_entries(table)
        self.host = host  # where known, entries may leave a match to the host's faster kernels

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        notes: list[Declined] = []
        result = mod
        for gv, func in mod.items():
            if isinstance(func, Function) and not (func.attrs.compiler or func.attrs.primitive):
                new = merge_composite(func, self.table, mod, notes, self.host)
                if new is not func:
                    result = result.with_function(gv, new)
        return with_declined(result, notes)

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if func.attrs.compiler or func.attrs.primitive:
            return func
        return merge_composite(func, self.table, mod, host=self.host)


class InlineComposites(FunctionPass):
    """Put back the composites no accelerator took, as plain calls.

    A composite left in `main` (its accelerator declined it, or a pin kept
    it off) is lowered by the default flow like any other call. A pin on
    the composite pins every call inside it.
    """

    name = "InlineComposites"
    opt_level = 0

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if func.attrs.compiler or func.attrs.primitive:
            return func
        pins = _pinned_targets(post_order(func.body, into_functions=False))

        def visit(old: Expr, new: Expr) -> Expr | None:
            if not (isinstance(new, Call) and isinstance(new.op, Function) and new.op.attrs.composite):
                return None
            inner = new.op
            body = inner.body
            if id(old) in pins:
                body = rewrite(body, lambda o, n: on_target(n, pins[id(old)])
                               if isinstance(n, Call) and not isinstance(n.op, Function) else None)
            return substitute(body, {id(p): a for p, a in zip(inner.params, new.args)})

        inlined = rewrite(func.body, visit, into_functions=False)
        if inlined is func.body:
            return func
        return infer_function(Function(func.params, inlined, func.ret_type, func.attrs), mod)
