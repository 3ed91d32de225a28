"""The Relay verifier: invariants every pass must keep.

Checked on each function of a module, in one walk over its graph:

- every variable is bound once, by a function parameter or a `let`;
- every variable is used inside the scope that binds it: a module's
  functions have no free variables (globals are `GlobalVar`s, not `Var`s),
  and primitive or external functions, which are lowered on their own, are
  closed too;
- every call passes as many arguments as its callee takes (an operator's
  `num_inputs`, read from the call's `Op` object; a function's parameters; a
  PrimFunc's inputs), and a called global exists in the module;
- types: with `require_types` (after InferType), and in any function that
  carries a checked type, every expression has one and a variable's is its
  annotation; wherever a type follows from the children's types (tuples,
  projections, lets, functions, calls of functions, constants) the two agree,
  so a type left stale by a rewrite is found. Operator calls are not re-typed.

A failure raises `VerificationError` naming the function and the node, with
the lines of the printed function around it (the node's line is marked).
Nested functions may use the variables of their enclosing function (closures);
the same sub-expression may be shared by several users (the graph is a DAG).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import VerificationError
from ..tir.stmt import PrimFunc
from ..tir.verify import verify_primfunc
from ..util.excerpt import MARKER, excerpt_at_marker
from .expr import Call, Constant, Expr, Function, GlobalVar, Let, Tuple, TupleGetItem, Var, children
from .module import IRModule
from .printer import expr_str
from .ty import FuncType, TensorType, TupleType, Type
from .visitor import post_order

_EMPTY: frozenset[int] = frozenset()


def verify_module(mod: IRModule, require_types: bool = False) -> None:
    """Verify every function of `mod`: Relay functions here, PrimFuncs with the TIR verifier."""
    for gv, func in mod.items():
        if isinstance(func, PrimFunc):
            verify_primfunc(func)
        else:
            verify_function(func, f"@{gv.name_hint}", mod, require_types)


def verify_function(func: Function, name: str = "fn", mod: IRModule | None = None,
                    require_types: bool = False) -> None:
    """Verify one top-level function (`name` is how errors refer to it)."""
    _Checker(func, name, mod, require_types).run()


class _Checker:
    def __init__(self, func: Function, name: str, mod: IRModule | None, require_types: bool) -> None:
        self.func = func
        self.name = name
        self.mod = mod
        # a typed function is typed throughout: InferType types every node, and a pass that
        # rebuilds a node drops the types of it and of everything above it, the function included
        self.require_types = require_types or func.checked_type_ is not None
        self.order = post_order(func)

    def run(self) -> None:
        binder: dict[int, Expr] = {}  # id(var) -> the Function or Let that binds it
        free: dict[int, frozenset[int]] = {}  # id(node) -> ids of the variables free in it
        for node in self.order:
            if self.require_types:
                self._check_typed(node)
            self._check_type_agrees(node)
            if isinstance(node, Function):
                if len({id(p) for p in node.params}) != len(node.params):
                    self.fail(node, "a function lists the same parameter twice", "repeated parameter")
                for p in node.params:
                    self._bind(p, node, binder)
                free[id(node)] = free[id(node.body)] - {id(p) for p in node.params}
                if (node.attrs.primitive or node.attrs.compiler) and node is not self.func and free[id(node)]:
                    kind = "a primitive" if node.attrs.primitive else f"an external ({node.attrs.compiler})"
                    self._fail_free(node, free, f"{kind} function must be closed")
            elif isinstance(node, Let):
                self._bind(node.var, node, binder)
                free[id(node)] = free[id(node.value)] | (free[id(node.body)] - {id(node.var)})
            elif isinstance(node, Var):
                free[id(node)] = frozenset((id(node),))
            else:
                kids = children(node)
                free[id(node)] = frozenset().union(*(free[id(k)] for k in kids)) if kids else _EMPTY
                if isinstance(node, Call):
                    self._check_call(node)
        if free[id(self.func)]:
            self._fail_free(self.func, free, "a module's function must be closed", binder)

    # ------------------------------------------------------------ checks
    def _bind(self, var: Var, site: Expr, binder: dict[int, Expr]) -> None:
        first = binder.get(id(var))
        if first is not None and first is not site:
            self.fail(site, f"%{var.name_hint} is bound twice (by {_site(first)} and by {_site(site)})",
                      f"%{var.name_hint} bound again")
        binder[id(var)] = site

    def _check_typed(self, node: Expr) -> None:
        if node.checked_type_ is None:
            self.fail(self._line_of(node), f"{_describe(node)} has no checked type (run InferType)",
                      "no type")
        if isinstance(node, Var) and node.type_annotation is not None \
                and node.checked_type_ != node.type_annotation:
            self.fail(self._line_of(node), f"%{node.name_hint} is annotated {node.type_annotation} "
                      f"but checked as {node.checked_type_}", "type differs from annotation")

    def _check_type_agrees(self, node: Expr) -> None:
        """A typed node's type follows from its children's (operator calls excepted: that is
        the type relation's job, and re-running every relation would cost an InferType)."""
        ty = node.checked_type_
        expected = _derived_type(node) if ty is not None else None
        if expected is not None and expected != ty:
            self.fail(self._line_of(node), f"{_describe(node)} is typed {ty}, but its parts give {expected} "
                      "(a stale type)", "stale type")
        if isinstance(node, Function) and None not in (node.ret_type, node.body.checked_type_) \
                and node.ret_type != node.body.checked_type_:
            self.fail(node, f"a function declares return type {node.ret_type}, its body has "
                      f"{node.body.checked_type_}", "return type differs")
        if isinstance(node, Let) and None not in (node.var.checked_type_, node.value.checked_type_) \
                and node.var.checked_type_ != node.value.checked_type_:
            self.fail(node, f"let %{node.var.name_hint}: {node.var.checked_type_} is bound to a "
                      f"{node.value.checked_type_} value", "let type differs")
        if isinstance(node, Call) and isinstance(node.op, (Function, GlobalVar)):
            fty = node.op.checked_type_
            args = tuple(a.checked_type_ for a in node.args)
            if isinstance(fty, FuncType) and None not in args and args != fty.arg_types:
                self.fail(node, f"call passes ({', '.join(map(str, args))}) to a function of type {fty}",
                          "argument types differ")

    def _check_call(self, call: Call) -> None:
        op = call.op
        got = len(call.args)
        if isinstance(op, Function):
            expected, what = len(op.params), "a function"
        elif isinstance(op, GlobalVar):
            if self.mod is None:
                return
            if op not in self.mod:
                self.fail(call, f"call of @{op.name_hint}, which is not in the module", "unknown global")
            callee = self.mod[op]
            if isinstance(callee, PrimFunc):
                expected, what = callee.num_inputs, f"PrimFunc @{op.name_hint}"
            else:
                expected, what = len(callee.params), f"@{op.name_hint}"
        else:
            # the Op object carries its arity (None: variadic); relay does not import the registry
            num_inputs = getattr(op, "num_inputs", None)
            if num_inputs is None:
                return
            expected, what = num_inputs, getattr(op, "name", repr(op))
        if got != expected:
            self.fail(call, f"call of {what} passes {got} argument{'s' * (got != 1)}, expected {expected}",
                      f"{got} argument{'s' * (got != 1)}, expected {expected}")

    def _fail_free(self, scope: Function, free: dict[int, frozenset[int]], why: str,
                   binder: dict[int, Expr] | None = None) -> None:
        var_id = min(free[id(scope)])  # any one of them; the message names it
        var = next(n for n in self.order if id(n) == var_id)
        assert isinstance(var, Var)
        user = self._user_of(var, scope)
        where = f" (it is bound by {_site(binder[var_id])}, elsewhere)" if binder and var_id in binder else ""
        self.fail(user, f"%{var.name_hint} is used outside any scope that binds it{where}: {why}",
                  f"free %{var.name_hint}")

    # ------------------------------------------------------------ reporting
    def _user_of(self, var: Var, scope: Function) -> Expr:
        """A node of `scope` that uses `var` (not as a binder), for the excerpt."""
        for node in post_order(scope):
            if isinstance(node, Let):
                if var is node.value or var is node.body:
                    return node
            elif not isinstance(node, Function) and any(k is var for k in children(node)):
                return node
            elif isinstance(node, Function) and node.body is var:
                return node
        return scope

    def _line_of(self, node: Expr) -> Expr:
        """The node whose printed line shows `node` (a variable has no line of its own)."""
        if not isinstance(node, (Var, GlobalVar)):
            return node
        for user in self.order:
            if isinstance(user, Function) and any(p is node for p in user.params):
                return user
            if any(k is node for k in children(user)):
                return user
        return self.func

    def fail(self, node: Expr, message: str, mark: str) -> None:
        note: Callable[[Expr], str | None] = lambda n: f"{MARKER} {mark}" if n is node else None
        text = expr_str(self.func, note)
        raise VerificationError(f"{self.name}: {message}\n{excerpt_at_marker(text)}")


def _derived_type(node: Expr) -> Type | None:
    """The type `node` must have given its children's types (None: not derivable here)."""
    if isinstance(node, Constant):
        ty = node.checked_type_  # compared field by field: building a TensorType per constant is slow
        data = node.data
        if isinstance(ty, TensorType) and ty.shape == data.shape and ty.dtype == data.dtype.name:
            return ty
        return TensorType(data.shape, data.dtype.name)
    if isinstance(node, Tuple):
        fields = [f.checked_type_ for f in node.fields]
        known = [f for f in fields if f is not None]
        return TupleType(tuple(known)) if len(known) == len(fields) else None
    if isinstance(node, TupleGetItem):
        tt = node.tuple_value.checked_type_
        return tt.fields[node.index] if isinstance(tt, TupleType) and 0 <= node.index < len(tt.fields) else None
    if isinstance(node, Let):
        return node.body.checked_type_
    if isinstance(node, Function):
        params = [p.checked_type_ for p in node.params]
        known = [p for p in params if p is not None]
        body = node.body.checked_type_
        return FuncType(tuple(known), body) if body is not None and len(known) == len(params) else None
    if isinstance(node, Call) and isinstance(node.op, (Function, GlobalVar)):
        fty = node.op.checked_type_
        return fty.ret_type if isinstance(fty, FuncType) else None
    return None


def _site(node: Expr) -> str:
    return "a let" if isinstance(node, Let) else "a function's parameters"


def _describe(node: Expr) -> str:
    if isinstance(node, Var):
        return f"%{node.name_hint}"
    if isinstance(node, GlobalVar):
        return f"@{node.name_hint}"
    if isinstance(node, Call) and not isinstance(node.op, (Function, GlobalVar)):
        return f"call of {getattr(node.op, 'name', node.op)}"
    return f"a {type(node).__name__}"
