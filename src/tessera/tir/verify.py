"""The TIR verifier: invariants every PrimFunc must keep.

- Buffers are declared before use: every buffer a load, store or pointer
  names is a parameter of the function or allocated by an enclosing
  `Allocate` (a view counts as its base buffer), and no buffer is declared
  twice in one scope.
- Variables are bound: every `Var` an expression reads is the variable of an
  enclosing `For` or `LetStmt`, and no variable is bound again inside its own
  scope. Sibling loops may share one variable (each binds it afresh): the
  lowering of a register tile loops over the tile with the same variables to
  clear it, accumulate into it and write it back.
- Dtypes agree: the operands of a binary operation share a dtype, and its
  result is that dtype (or bool, for comparisons and logic, whose operands
  are bool); bitwise operands are integers; conditions are bool; a store's
  value and a load have the buffer's dtype; a load or store has one integer
  index per buffer dimension; a loop's extent has its variable's dtype, as a
  let's value has its variable's; immediates fit their dtype (int32, the
  index dtype, excepted: see below); an intrinsic takes one argument of the
  kind it computes on.
- No tensor-expression read (`ProducerLoad`) is left.

Index arithmetic is exact until WidenIndices (at code generation) computes
in int64 what leaves int32, so an int32 immediate may hold a larger value
(the extent of a loop over 2**31 + 1 elements). Bounds are not checked:
lowering addresses a row-major buffer with a flat offset in its last index.

Failures raise `VerificationError` naming the PrimFunc, with the statement
and the headers of the loops, lets, allocations and `if`s around it.
"""

from __future__ import annotations

from collections.abc import Iterator

from .. import dtype as dt
from ..errors import VerificationError
from ..util.excerpt import MARKER, shorten
from . import expr as E
from . import stmt as S
from .buffer import Buffer
from .index_width import INDEX
from .printer import expr_str, stmt_header


def verify_primfunc(func: S.PrimFunc) -> None:
    """Raise `VerificationError` if `func` breaks a TIR invariant."""
    _Checker(func).run()


def _integral(dtype: str) -> bool:
    return dt.is_supported(dtype) and (dt.is_int(dtype) or dtype == "bool")


def _floating(dtype: str) -> bool:
    return dt.is_supported(dtype) and dt.is_float(dtype)


_BITWISE = frozenset({E.BinOp.BITAND, E.BinOp.BITOR, E.BinOp.BITXOR, E.BinOp.SHL, E.BinOp.SHR})
# intrinsics that classify a float (the rest map a float to a float of its dtype, but ABS: ints)
_CLASSIFY = frozenset({E.Intrinsic.ISNAN, E.Intrinsic.ISINF, E.Intrinsic.ISFINITE, E.Intrinsic.SIGNBIT})


class _Checker:
    def __init__(self, func: S.PrimFunc) -> None:
        self.func = func
        self.vars: set[int] = set()  # ids of variables in scope
        self.buffers: set[int] = set()  # ids of buffers in scope
        self.path: list[tuple[S.Stmt, str]] = []  # enclosing statements, with the branch taken
        self.current: S.Stmt = func.body

    def run(self) -> None:
        for b in self.func.params:
            if id(b) in self.buffers:
                self.fail(f"buffer {b.name} is listed twice among the parameters")
            self.buffers.add(id(b))
        self.stmt(self.func.body)

    # ------------------------------------------------------------ statements
    def stmt(self, s: S.Stmt) -> None:
        self.current = s
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, S.For):
            self.expr(s.extent)
            if not _integral(s.extent.dtype) or s.extent.dtype != s.loop_var.dtype:
                self.fail(f"loop {s.loop_var.name} is {s.loop_var.dtype} but its extent is {s.extent.dtype}")
            self.scoped_var(s, s.loop_var, s.body)
        elif isinstance(s, S.LetStmt):
            self.expr(s.value)
            if s.value.dtype != s.var.dtype:
                self.fail(f"let {s.var.name} is {s.var.dtype} but its value is {s.value.dtype}")
            self.scoped_var(s, s.var, s.body)
        elif isinstance(s, S.Allocate):
            if id(s.buffer) in self.buffers:
                self.fail(f"buffer {s.buffer.name} is allocated while already declared")
            self.buffers.add(id(s.buffer))
            self.nested(s, "", s.body)
            self.buffers.discard(id(s.buffer))
        elif isinstance(s, S.IfThenElse):
            self.expr(s.cond)
            self.condition(s.cond, "an if")
            self.nested(s, "", s.then_case)
            if s.else_case is not None:
                self.nested(s, "else", s.else_case)
        elif isinstance(s, S.BufferStore):
            self.access(s.buffer, s.indices, "store into")
            for i in s.indices:
                self.expr(i)
            self.expr(s.value)
            if s.value.dtype != s.buffer.dtype:
                self.fail(f"stores a {s.value.dtype} value into {s.buffer.dtype} buffer {s.buffer.name}")
        elif isinstance(s, (S.Evaluate, S.Return)):
            self.expr(s.value)
        else:
            self.fail(f"unknown statement {type(s).__name__}")

    def scoped_var(self, s: S.Stmt, var: E.Var, body: S.Stmt) -> None:
        if id(var) in self.vars:
            self.fail(f"variable {var.name} is bound again inside its own scope")
        self.vars.add(id(var))
        self.nested(s, "", body)
        self.vars.discard(id(var))

    def nested(self, s: S.Stmt, branch: str, body: S.Stmt) -> None:
        self.path.append((s, branch))
        self.stmt(body)
        self.path.pop()
        self.current = s

    # ----------------------------------------------------------- expressions
    def expr(self, root: E.PrimExpr) -> None:
        for e in _distinct_nodes(root):
            if isinstance(e, E.Var):
                if id(e) not in self.vars:
                    self.fail(f"variable {e.name} is used outside any loop or let that binds it")
            elif isinstance(e, E.BinaryOp):
                self.binary(e)
            elif isinstance(e, E.UnaryOp):
                want = "bool" if e.op is E.UnOp.NOT else e.a.dtype
                if e.dtype != want:
                    self.fail(f"{e.op.name.lower()} of a {e.a.dtype} operand is typed {e.dtype}, expected {want}")
            elif isinstance(e, E.Select):
                self.condition(e.cond, "a select")
                if not e.true_value.dtype == e.false_value.dtype == e.dtype:
                    self.fail(f"select of {e.true_value.dtype} and {e.false_value.dtype} is typed {e.dtype}")
            elif isinstance(e, E.BufferLoad):
                self.access(e.buffer, e.indices, "load from")
                if e.dtype != e.buffer.dtype:
                    self.fail(f"load from {e.buffer.dtype} buffer {e.buffer.name} is typed {e.dtype}")
            elif isinstance(e, E.BufferPtr):
                self.declared(e.buffer, "address of")
                if not _integral(e.offset.dtype):
                    self.fail(f"offset into {e.buffer.name} is {e.offset.dtype}, expected an integer")
            elif isinstance(e, E.IntImm):
                if not _integral(e.dtype):
                    self.fail(f"integer immediate {e.value} has dtype {e.dtype}")
                # int32 is the index dtype: index arithmetic holds exact values until WidenIndices
                # (at code generation) moves what leaves int32 to int64, e.g. a 2**31 + 1 extent
                if e.dtype != INDEX and not dt.min_value(e.dtype) <= e.value <= dt.max_value(e.dtype):
                    self.fail(f"integer immediate {e.value} does not fit its dtype {e.dtype}")
            elif isinstance(e, E.FloatImm):
                if not (dt.is_supported(e.dtype) and dt.is_float(e.dtype)):
                    self.fail(f"float immediate {e.value} has dtype {e.dtype}")
            elif isinstance(e, E.Call) and isinstance(e.func, E.Intrinsic):
                self.intrinsic(e)
            elif isinstance(e, E.ProducerLoad):
                self.fail("a tensor-expression read (ProducerLoad) is left after lowering")
            elif isinstance(e, E.ElementMap):
                self.element_map(e)

    def element_map(self, e: E.ElementMap) -> None:
        """Its body reads its variable (bound there alone) and constants: the kernel runs it on its own blocks."""
        if id(e.var) in self.vars:
            self.fail(f"variable {e.var.name} is bound again inside its own scope")
        if e.body.dtype != e.var.dtype:
            self.fail(f"an element map of {e.var.dtype} values computes {e.body.dtype}")
        if any(isinstance(n, (E.BufferLoad, E.BufferPtr, E.ProducerLoad)) for n in _distinct_nodes(e.body)):
            self.fail(f"an element map reads a buffer: {expr_str(e)}")
        outer, self.vars = self.vars, {id(e.var)}  # nothing but its own variable
        try:
            self.expr(e.body)
        finally:
            self.vars = outer

    def binary(self, e: E.BinaryOp) -> None:
        if dt.is_supported(e.a.dtype) and dt.is_storage_only(e.a.dtype):
            self.fail(f"{e.op.value} of {e.a.dtype} operands: {e.a.dtype} only holds values, cast to float32 to "
                      "compute")
        if e.a.dtype != e.b.dtype:
            self.fail(f"operands of {e.op.value} disagree: {e.a.dtype} vs {e.b.dtype}")
        logical = e.op in E.LOGICAL
        want = "bool" if logical or e.op in E.COMPARISONS else e.a.dtype
        if e.dtype != want:
            self.fail(f"{e.op.value} of {e.a.dtype} operands is typed {e.dtype}, expected {want}")
        if logical and e.a.dtype != "bool":
            self.fail(f"operands of {e.op.value} are {e.a.dtype}, expected bool")
        if e.op in _BITWISE and not _integral(e.a.dtype):
            self.fail(f"operands of {e.op.value} are {e.a.dtype}, expected integers")

    def intrinsic(self, e: E.Call) -> None:
        assert isinstance(e.func, E.Intrinsic)
        name = e.func.value
        if len(e.args) != 1:
            self.fail(f"intrinsic {name} takes 1 argument, got {len(e.args)}")
        arg = e.args[0].dtype
        if dt.is_supported(arg) and dt.is_storage_only(arg):
            self.fail(f"{name} of a {arg} value: {arg} only holds values, cast to float32 to compute")
        elif e.func in _CLASSIFY:
            if e.dtype != "bool" or not _floating(arg):
                self.fail(f"{name} of a {arg} value is typed {e.dtype}, expected a float argument and bool")
        elif e.func is E.Intrinsic.ABS:
            if e.dtype != arg or not _integral(arg):
                self.fail(f"abs of a {arg} value is typed {e.dtype}, expected an integer argument of that dtype")
        elif e.dtype != arg or not _floating(arg):
            self.fail(f"{name} of a {arg} value is typed {e.dtype}, expected a float argument of that dtype")

    def condition(self, cond: E.PrimExpr, where: str) -> None:
        if cond.dtype != "bool":
            self.fail(f"the condition of {where} is {cond.dtype}, expected bool")

    def access(self, buf: Buffer, indices: tuple[E.PrimExpr, ...], verb: str) -> None:
        """A load or store (its index expressions are walked by the caller)."""
        self.declared(buf, verb)
        if len(indices) != len(buf.shape):
            self.fail(f"{verb} {buf.name} (shape {list(buf.shape)}) with {len(indices)} indices")
        for i in indices:
            if not _integral(i.dtype):
                self.fail(f"{verb} {buf.name} with a {i.dtype} index {expr_str(i)}")

    def declared(self, buf: Buffer, verb: str) -> None:
        b: Buffer | None = buf
        while b is not None:
            if id(b) in self.buffers:
                return
            b = b.base
        params = ", ".join(p.name for p in self.func.params) or "none"
        self.fail(f"{verb} buffer {buf.name}, which is neither a parameter ({params}) nor allocated around it")

    # ------------------------------------------------------------- reporting
    def fail(self, message: str) -> None:
        raise VerificationError(f"PrimFunc {self.func.name}: {message}\n{self.excerpt()}")

    def excerpt(self, width: int = 120) -> str:
        """The headers of the statements around the current one, then its own line (marked)."""
        lines = []
        for depth, (s, branch) in enumerate(self.path):
            head = stmt_header(s, depth)
            lines.append(head if not branch else "  " * depth + f"{branch}:  # of {head.strip()}")
        lines.append(stmt_header(self.current, len(self.path)) + f"  # {MARKER}")
        return "\n".join(shorten(line, width) for line in lines)


def _distinct_nodes(root: E.PrimExpr) -> Iterator[E.PrimExpr]:
    """Every node under `root` once (a shared sub-tree is visited once)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        if not isinstance(e, E.ElementMap):  # (its body is checked with its variable bound: element_map)
            stack.extend(E.children(e))
