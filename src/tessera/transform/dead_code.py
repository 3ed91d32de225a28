"""DeadCodeElimination: drop what no output depends on.

In a dataflow graph an unused call is unreachable anyway; what remains dead
is `let` bindings whose variable is never read, and module functions that
`main` (transitively) never calls.
"""

from __future__ import annotations

from ..relay.expr import Expr, Function, GlobalVar, Let
from ..relay.module import IRModule
from ..relay.visitor import post_order, rewrite
from ..tir.stmt import PrimFunc
from .pass_infra import Pass, PassContext


def remove_unused_lets(func: Function) -> Function:
    def visit(old: Expr, new: Expr) -> Expr | None:
        if isinstance(new, Let):
            readers = [n for n in post_order(new.body) if n is new.var]
            if not readers:
                return new.body
        return None

    body = rewrite(func.body, visit)
    return func if body is func.body else Function(func.params, body, func.ret_type, func.attrs)


def reachable_globals(mod: IRModule, root: str = "main") -> set[str]:
    seen: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen or name not in mod:
            continue
        seen.add(name)
        func = mod[name]
        if isinstance(func, PrimFunc):
            continue
        stack.extend(n.name_hint for n in post_order(func) if isinstance(n, GlobalVar))
    return seen


class DeadCodeElimination(Pass):
    name = "DeadCodeElimination"
    opt_level = 1

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        live = reachable_globals(mod)
        result = mod
        for gv, func in mod.items():
            if gv.name_hint not in live:
                result = result.without(gv)
            elif isinstance(func, Function):
                cleaned = remove_unused_lets(func)
                if cleaned is not func:
                    result = result.with_function(gv, cleaned)
        return result
