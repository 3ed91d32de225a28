"""A readable text form of TIR, for debugging and `print(mod)`."""

from __future__ import annotations

from . import expr as E
from . import stmt as S


def expr_str(e: E.PrimExpr) -> str:
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.IntImm):
        return str(e.value) if e.dtype in ("int32", "bool") else f"{e.dtype}({e.value})"
    if isinstance(e, E.FloatImm):
        return repr(e.value) if e.dtype == "float32" else f"{e.dtype}({e.value!r})"
    if isinstance(e, E.BinaryOp):
        a, b = expr_str(e.a), expr_str(e.b)
        if e.op.value.isalpha():
            return f"{e.op.value}({a}, {b})"
        return f"({a} {e.op.value} {b})"
    if isinstance(e, E.UnaryOp):
        return f"{e.op.value}({expr_str(e.a)})"
    if isinstance(e, E.Select):
        kind = "guarded_select" if e.guarded else "select"
        return f"{kind}({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.BufferLoad):
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, E.BufferPtr):
        return f"&{e.buffer.name}[{expr_str(e.offset)}]"
    if isinstance(e, E.ProducerLoad):
        name = getattr(e.producer, "name", "?")
        return f"{name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, E.ElementMap):
        return f"map({e.var.name} => {expr_str(e.body)})"
    if isinstance(e, E.Call):
        name = e.func if isinstance(e.func, str) else e.func.value
        prefix = "call_extern " if e.is_extern else ""
        return f"{prefix}{name}({', '.join(expr_str(a) for a in e.args)})"
    return repr(e)


def stmt_lines(s: S.Stmt, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(s, S.For):
        kind = "" if s.kind is S.ForKind.SERIAL else f" {s.kind.value}"
        head = f"{pad}for {s.loop_var.name} in range({expr_str(s.extent)}){kind}:"
        return [head, *stmt_lines(s.body, indent + 1)]
    if isinstance(s, S.SeqStmt):
        return [line for x in s.stmts for line in stmt_lines(x, indent)]
    if isinstance(s, S.BufferStore):
        idx = ", ".join(expr_str(i) for i in s.indices)
        return [f"{pad}{s.buffer.name}[{idx}] = {expr_str(s.value)}"]
    if isinstance(s, S.IfThenElse):
        lines = [f"{pad}if {expr_str(s.cond)}:", *stmt_lines(s.then_case, indent + 1)]
        if s.else_case is not None:
            lines += [f"{pad}else:", *stmt_lines(s.else_case, indent + 1)]
        return lines
    if isinstance(s, S.Allocate):
        b = s.buffer
        head = f"{pad}{b.name} = allocate({list(b.shape)}, {b.dtype}, {b.scope.value})"
        return [head, *stmt_lines(s.body, indent)]
    if isinstance(s, S.LetStmt):
        return [f"{pad}{s.var.name} = {expr_str(s.value)}", *stmt_lines(s.body, indent)]
    if isinstance(s, S.Evaluate):
        return [f"{pad}{expr_str(s.value)}"]
    if isinstance(s, S.Return):
        return [f"{pad}return {expr_str(s.value)}"]
    return [f"{pad}{s!r}"]


def stmt_header(s: S.Stmt, indent: int = 0) -> str:
    """The first line of `s` alone: a loop, let, allocation or `if` without its body."""
    return stmt_lines(_without_body(s), indent)[0] if not isinstance(s, S.SeqStmt) or s.stmts else "  " * indent


_NO_BODY = S.SeqStmt(())


def _without_body(s: S.Stmt) -> S.Stmt:
    if isinstance(s, S.For):
        return S.For(s.loop_var, s.extent, _NO_BODY, s.kind)
    if isinstance(s, S.LetStmt):
        return S.LetStmt(s.var, s.value, _NO_BODY)
    if isinstance(s, S.Allocate):
        return S.Allocate(s.buffer, _NO_BODY)
    if isinstance(s, S.IfThenElse):
        return S.IfThenElse(s.cond, _NO_BODY)
    if isinstance(s, S.SeqStmt):
        return _without_body(s.stmts[0])
    return s


def primfunc_str(f: S.PrimFunc) -> str:
    params = ", ".join(f"{b.name}: Buffer({list(b.shape)}, {b.dtype})" for b in f.params)
    lines = [f"@prim_func def {f.name}({params}):  # {f.num_inputs} inputs"]
    lines += stmt_lines(f.body, 1)
    return "\n".join(lines)
