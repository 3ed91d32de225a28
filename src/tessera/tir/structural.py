"""Structural equality of TIR: expressions, statements and PrimFuncs.

Two pieces of TIR are equal when they compute the same thing the same way:
the same statement tree, operators, immediates and dtypes, and variables
and buffers that correspond one-to-one where they are defined (a loop's or
a let's variable, an allocation, a PrimFunc's parameters). Names do not
matter, so a test can build the expected output of a pass by hand and
compare. Definitions are scoped: sibling loops that reuse one variable
match sibling loops with two. Variables and buffers used without a
definition (free) must be the same objects, unless `map_free_vars` is set.
A view (a buffer with a `base`) matches a view of the matching base with
the same shape, dtype and offset.

`first_difference` says where two pieces first differ, for assertion
messages; `assert_structural_equal` raises with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

from . import expr as E
from . import stmt as S
from .buffer import Buffer
from .printer import expr_str, primfunc_str, stmt_header, stmt_lines

Node = Union[S.PrimFunc, S.Stmt, E.PrimExpr]
Path = tuple[str, ...]


def structural_equal(a: Node, b: Node, map_free_vars: bool = False) -> bool:
    return first_difference(a, b, map_free_vars) is None


def assert_structural_equal(a: Node, b: Node, map_free_vars: bool = False) -> None:
    """Raise AssertionError naming the first difference, with both sides printed."""
    diff = first_difference(a, b, map_free_vars)
    if diff is not None:
        raise AssertionError(f"{diff}\n--- left:\n{_text(a)}\n--- right:\n{_text(b)}")


def first_difference(a: Node, b: Node, map_free_vars: bool = False) -> Optional[str]:
    """None when `a` and `b` are structurally equal, else where and how they first differ."""
    return _Comparison(map_free_vars).run(a, b)


class _Differ(Exception):
    def __init__(self, path: Path, why: str) -> None:
        super().__init__(why)
        self.path = path
        self.why = why


_Task = Callable[[], None]


class _Comparison:
    def __init__(self, map_free_vars: bool) -> None:
        self.map_free_vars = map_free_vars
        # id(definition in a) -> definition in b, and back; one map for variables and buffers
        self.forward: dict[int, object] = {}
        self.backward: dict[int, object] = {}
        self.tasks: list[_Task] = []  # a stack: compare children, then leave scopes

    def run(self, a: Node, b: Node) -> Optional[str]:
        self.push(a, b, ("root",))
        try:
            while self.tasks:
                self.tasks.pop()()
        except _Differ as d:
            return f"first difference at {'.'.join(d.path)}: {d.why}"
        return None

    def push(self, x: Node, y: Node, path: Path) -> None:
        self.tasks.append(lambda: self.node(x, y, path))

    def push_all(self, pairs: list[tuple[Node, Node, Path]]) -> None:
        """Compare `pairs` in order (the task stack runs the last pushed first)."""
        for x, y, path in reversed(pairs):
            self.push(x, y, path)

    # ------------------------------------------------------------ definitions
    def scope(self, defs: Sequence[tuple[object, object, Path]], x: Node, y: Node, path: Path) -> None:
        """Compare `x` and `y` with `defs` (pairs defined here) corresponding while they are compared."""
        saved = [(self.forward.get(id(a)), self.backward.get(id(b))) for a, b, _ in defs]
        for a, b, where in defs:
            if isinstance(a, Buffer) and isinstance(b, Buffer):
                self.same_buffer_type(a, b, where)
            elif isinstance(a, E.Var) and isinstance(b, E.Var) and a.dtype != b.dtype:
                raise _Differ(where, f"variables {a.name}: {a.dtype} vs {b.name}: {b.dtype}")
            self.forward[id(a)], self.backward[id(b)] = b, a

        def leave() -> None:  # restore what the definitions hid (an outer use of the same object)
            for (a, b, _), (old_b, old_a) in zip(defs, saved):
                _restore(self.forward, id(a), old_b)
                _restore(self.backward, id(b), old_a)

        self.tasks.append(leave)  # runs once the scope's whole comparison is done
        self.push(x, y, path)

    def used(self, x: object, y: object, path: Path, what: str) -> None:
        """A use of variable or buffer `x` in a against `y` in b."""
        mapped = self.forward.get(id(x))
        if mapped is not None or id(y) in self.backward:
            if mapped is not y:
                raise _Differ(path, f"{what} {_name(x)} and {_name(y)} are not defined at corresponding places")
            return
        if x is y:
            return
        if not self.map_free_vars:
            raise _Differ(path, f"free {what}s {_name(x)} and {_name(y)} are different objects "
                                "(map_free_vars=True maps them)")
        if isinstance(x, Buffer) and isinstance(y, Buffer):
            self.same_buffer_type(x, y, path)
        self.forward[id(x)], self.backward[id(y)] = y, x  # free: they correspond from here on

    def buffer(self, x: Buffer, y: Buffer, path: Path) -> None:
        defined = id(x) in self.forward or id(y) in self.backward
        if defined or x.base is None or y.base is None:
            self.used(x, y, path, "buffer")
            return
        self.same_buffer_type(x, y, path)  # two views: compare what they view
        if x.byte_offset != y.byte_offset:
            raise _Differ(path, f"views {x.name} and {y.name} start at bytes {x.byte_offset} and {y.byte_offset}")
        self.buffer(x.base, y.base, path + ("base",))

    @staticmethod
    def same_buffer_type(x: Buffer, y: Buffer, path: Path) -> None:
        for field in ("shape", "dtype", "scope"):
            if getattr(x, field) != getattr(y, field):
                raise _Differ(path, f"buffers {x.name} and {y.name} differ in {field}: "
                                    f"{getattr(x, field)} vs {getattr(y, field)}")

    # ----------------------------------------------------------------- nodes
    def node(self, x: Node, y: Node, path: Path) -> None:
        if type(x) is not type(y):
            raise _Differ(path, f"{type(x).__name__} vs {type(y).__name__}: {_short(x)} vs {_short(y)}")
        if isinstance(x, S.PrimFunc) and isinstance(y, S.PrimFunc):
            self.primfunc(x, y, path)
        elif isinstance(x, S.Stmt) and isinstance(y, S.Stmt):
            self.stmt(x, y, path)
        elif isinstance(x, E.PrimExpr) and isinstance(y, E.PrimExpr):
            self.expr(x, y, path)
        else:
            raise TypeError(f"structural_equal: cannot compare {type(x).__name__}")

    def primfunc(self, x: S.PrimFunc, y: S.PrimFunc, path: Path) -> None:
        for field in ("name", "num_inputs"):
            if getattr(x, field) != getattr(y, field):
                raise _Differ(path, f"{field} {getattr(x, field)!r} vs {getattr(y, field)!r}")
        if dict(x.attrs) != dict(y.attrs):
            raise _Differ(path + ("attrs",), f"{dict(x.attrs)} vs {dict(y.attrs)}")
        if len(x.params) != len(y.params):
            raise _Differ(path + ("params",), f"{len(x.params)} vs {len(y.params)} parameters")
        params = [(p, q, path + (f"params[{k}]",)) for k, (p, q) in enumerate(zip(x.params, y.params))]
        self.scope(params, x.body, y.body, path + ("body",))

    def stmt(self, x: S.Stmt, y: S.Stmt, path: Path) -> None:
        if isinstance(x, S.SeqStmt):
            assert isinstance(y, S.SeqStmt)
            if len(x.stmts) != len(y.stmts):
                raise _Differ(path, f"{len(x.stmts)} vs {len(y.stmts)} statements")
            self.push_all([(a, b, path + (f"stmts[{k}]",)) for k, (a, b) in enumerate(zip(x.stmts, y.stmts))])
        elif isinstance(x, S.For):
            assert isinstance(y, S.For)
            if x.kind is not y.kind:
                raise _Differ(path, f"loop kinds {x.kind.value} vs {y.kind.value}")
            defs: list[tuple[object, object, Path]] = [(x.loop_var, y.loop_var, path + ("loop_var",))]
            self.then_scope(defs, x.body, y.body, path + ("body",))
            self.push(x.extent, y.extent, path + ("extent",))  # outside the loop's scope: compared first
        elif isinstance(x, S.LetStmt):
            assert isinstance(y, S.LetStmt)
            self.then_scope([(x.var, y.var, path + ("var",))], x.body, y.body, path + ("body",))
            self.push(x.value, y.value, path + ("value",))  # outside the let's scope: compared first
        elif isinstance(x, S.Allocate):
            assert isinstance(y, S.Allocate)
            self.scope([(x.buffer, y.buffer, path + ("buffer",))], x.body, y.body, path + ("body",))
        elif isinstance(x, S.BufferStore):
            assert isinstance(y, S.BufferStore)
            self.accessed(x.buffer, x.indices, y.buffer, y.indices, path)
            self.push(x.value, y.value, path + ("value",))
        elif isinstance(x, S.IfThenElse):
            assert isinstance(y, S.IfThenElse)
            if (x.else_case is None) != (y.else_case is None):
                raise _Differ(path, "one `if` has an else branch, the other not")
            pairs: list[tuple[Node, Node, Path]] = [(x.cond, y.cond, path + ("cond",)),
                                                    (x.then_case, y.then_case, path + ("then_case",))]
            if x.else_case is not None and y.else_case is not None:
                pairs.append((x.else_case, y.else_case, path + ("else_case",)))
            self.push_all(pairs)
        elif isinstance(x, (S.Evaluate, S.Return)):
            assert isinstance(y, (S.Evaluate, S.Return))
            self.push(x.value, y.value, path + ("value",))
        else:
            raise TypeError(f"structural_equal: unknown statement {type(x).__name__}")

    def then_scope(self, defs: Sequence[tuple[object, object, Path]], x: Node, y: Node, path: Path) -> None:
        """`scope(...)`, once the tasks pushed after this one have run."""
        self.tasks.append(lambda: self.scope(defs, x, y, path))

    def accessed(self, xb: Buffer, xi: tuple[E.PrimExpr, ...], yb: Buffer, yi: tuple[E.PrimExpr, ...],
                 path: Path) -> None:
        self.buffer(xb, yb, path + ("buffer",))
        if len(xi) != len(yi):
            raise _Differ(path + ("indices",), f"{len(xi)} vs {len(yi)} indices")
        self.push_all([(a, b, path + (f"indices[{k}]",)) for k, (a, b) in enumerate(zip(xi, yi))])

    def expr(self, x: E.PrimExpr, y: E.PrimExpr, path: Path) -> None:
        if x.dtype != y.dtype:
            raise _Differ(path, f"dtypes {x.dtype} vs {y.dtype}: {_short(x)} vs {_short(y)}")
        if isinstance(x, E.Var):
            self.used(x, y, path, "variable")
            return
        if isinstance(x, (E.IntImm, E.FloatImm)):
            assert isinstance(y, (E.IntImm, E.FloatImm))
            if not _same_number(x.value, y.value):
                raise _Differ(path, f"{_short(x)} vs {_short(y)}")
            return
        shallow = _SHALLOW.get(type(x))
        if shallow is not None and shallow(x) != shallow(y):
            raise _Differ(path, f"{_short(x)} vs {_short(y)}")
        if isinstance(x, E.BufferLoad):
            assert isinstance(y, E.BufferLoad)
            self.accessed(x.buffer, x.indices, y.buffer, y.indices, path)
            return
        if isinstance(x, E.BufferPtr):
            assert isinstance(y, E.BufferPtr)
            self.buffer(x.buffer, y.buffer, path + ("buffer",))
        if isinstance(x, E.ElementMap):  # its variable defined in its body alone
            assert isinstance(y, E.ElementMap)
            self.scope(((x.var, y.var, path + ("var",)),), x.body, y.body, path + ("body",))
            return
        if isinstance(x, E.ProducerLoad) and isinstance(y, E.ProducerLoad) and x.producer is not y.producer:
            raise _Differ(path, f"reads of different tensors: {_short(x)} vs {_short(y)}")
        xs, ys = E.children(x), E.children(y)
        if len(xs) != len(ys):
            raise _Differ(path, f"{len(xs)} vs {len(ys)} operands: {_short(x)} vs {_short(y)}")
        self.push_all([(a, b, path + (f"{type(x).__name__}[{k}]",)) for k, (a, b) in enumerate(zip(xs, ys))])


# what must be equal in two nodes of a type, apart from their children (and dtype, checked first)
_SHALLOW: dict[type, Callable[[Any], object]] = {
    E.BinaryOp: lambda e: e.op,
    E.UnaryOp: lambda e: e.op,
    E.Select: lambda e: e.guarded,
    E.Call: lambda e: e.func,
}


def _same_number(a: float, b: float) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and (math.copysign(1, a) == math.copysign(1, b) if a == 0 else True)


def _restore(table: dict[int, object], key: int, value: object) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _name(x: object) -> str:
    return getattr(x, "name", repr(x))


def _short(x: Node, width: int = 80) -> str:
    if isinstance(x, S.PrimFunc):
        text = f"PrimFunc {x.name}"
    elif isinstance(x, S.SeqStmt):
        text = f"{len(x.stmts)} statements" + (f" from {stmt_header(x.stmts[0]).strip()}" if x.stmts else "")
    elif isinstance(x, S.Stmt):
        text = stmt_header(x).strip()
    else:
        text = expr_str(x)
    return text if len(text) <= width else text[: width - 3] + "..."


def _text(x: Node) -> str:
    if isinstance(x, S.PrimFunc):
        return primfunc_str(x)
    if isinstance(x, S.Stmt):
        return "\n".join(stmt_lines(x))
    return expr_str(x)
