"""WidenIndices: 64-bit index arithmetic exactly where 32 bits could overflow.

Loop variables and index expressions are built as int32: on a Cortex-M,
64-bit arithmetic costs several instructions per operation, and every
tensor a microcontroller holds is far below 2**31 elements. A host tensor
may not be (a bool[65536, 32769] is 2**31 + 65536 elements), and there an
int32 flat offset wraps and the kernel writes outside its buffer.

The decision is made per expression from the static extents: with every
loop variable's range known, an int32 expression whose exact interval
(`bounds.py`) leaves int32 at any of its operations is rewritten to compute
in int64; everything else is left exactly as it was, so the C of small
kernels does not change by a byte. A loop whose extent passes 2**31 - 1
gets an int64 variable. Flattening a multi-dimensional index into a buffer
(in the C code generator) uses int64 when the buffer has more than 2**31
elements.

What counts as index arithmetic: the per-dimension indices of loads and
stores, pointer offsets and loop extents, whatever they compute from; and,
elsewhere, integer arithmetic on loop variables (a position used as a
value). Arithmetic on data alone keeps its C int32 semantics.
"""

from __future__ import annotations

from .. import dtype as dt
from . import expr as E
from . import stmt as S
from .bounds import ARITHMETIC, Bounds, BoundsAnalysis, dtype_bounds, fits
from .functor import rebuild

INDEX, WIDE = "int32", "int64"


def widen_indices(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with int64 index arithmetic where int32 could overflow (`func` itself when nowhere)."""
    widener = _Widener()
    body = widener.stmt(func.body)
    if not widener.changed:
        return func
    return S.PrimFunc(func.name, func.params, body, func.num_inputs, func.attrs)


def _is_arith(e: E.PrimExpr) -> bool:
    """An int32 node of index arithmetic: its value is computed from its operands' values."""
    if e.dtype != INDEX:
        return False
    if isinstance(e, E.BinaryOp):
        return e.op in ARITHMETIC
    return isinstance(e, (E.Var, E.IntImm, E.Select)) or (isinstance(e, E.UnaryOp) and e.op is E.UnOp.NEG)


def _operands(e: E.PrimExpr) -> tuple[E.PrimExpr, ...]:
    """The operands of an arithmetic node that carry its value (a select's condition does not)."""
    if isinstance(e, E.Select):
        return (e.true_value, e.false_value)
    return E.children(e)


class _Widener:
    def __init__(self) -> None:
        self.ranges: dict[int, Bounds] = {}  # id(var) -> bounds, for variables in scope
        self.wide: dict[int, E.Var] = {}  # id(int32 var) -> its int64 replacement
        self.changed = False

    # ------------------------------------------------------------ statements
    def stmt(self, s: S.Stmt) -> S.Stmt:
        if isinstance(s, S.For):
            return self._for(s)
        if isinstance(s, S.LetStmt):
            return self._let(s)
        if isinstance(s, S.SeqStmt):
            return S.SeqStmt(tuple(self.stmt(x) for x in s.stmts))
        if isinstance(s, S.BufferStore):
            return S.BufferStore(s.buffer, self.value(s.value), tuple(self.index(i) for i in s.indices))
        if isinstance(s, S.IfThenElse):
            other = None if s.else_case is None else self.stmt(s.else_case)
            return S.IfThenElse(self.value(s.cond), self.stmt(s.then_case), other)
        if isinstance(s, S.Allocate):
            return S.Allocate(s.buffer, self.stmt(s.body))
        if isinstance(s, S.Evaluate):
            return S.Evaluate(self.value(s.value))
        if isinstance(s, S.Return):
            return S.Return(self.value(s.value))
        raise TypeError(f"WidenIndices: unknown statement {type(s).__name__}")

    def _bind(self, var: E.Var, bounds: Bounds) -> E.Var:
        """Record `var`'s range; an int32 variable whose range leaves int32 becomes int64."""
        self.ranges[id(var)] = bounds
        if var.dtype == INDEX and not fits(bounds, INDEX):
            self.changed = True
            return self.wide.setdefault(id(var), E.Var(var.name, WIDE))
        return var

    def _for(self, s: S.For) -> S.Stmt:
        hi = BoundsAnalysis(self.ranges)(s.extent)[1]
        var = self._bind(s.loop_var, (0, max(hi - 1, 0)))
        extent = self.to_wide(s.extent) if var.dtype == WIDE and s.extent.dtype == INDEX else self.index(s.extent)
        return S.For(var, extent, self.stmt(s.body), s.kind)

    def _let(self, s: S.LetStmt) -> S.Stmt:
        bounds = BoundsAnalysis(self.ranges)(s.value) if _integral(s.value.dtype) else dtype_bounds(INDEX)
        var = self._bind(s.var, bounds)
        value = self.to_wide(s.value) if var is not s.var else self.value(s.value)
        return S.LetStmt(var, value, self.stmt(s.body))

    # ----------------------------------------------------------- expressions
    def _needs_wide(self, e: E.PrimExpr, in_index: bool) -> bool:
        """Whether int32 arithmetic `e` may overflow (in a value, only arithmetic on variables counts)."""
        nodes = _arith_nodes(e)
        if any(isinstance(n, E.Var) and id(n) in self.wide for n in nodes):
            return True
        if not in_index and not any(isinstance(n, E.Var) for n in nodes):
            return False
        bounds = BoundsAnalysis(self.ranges)
        return not all(fits(bounds(n), INDEX) for n in nodes)

    def index(self, e: E.PrimExpr) -> E.PrimExpr:
        """An index: its value may come back as int64 (the user of an index converts it)."""
        if _is_arith(e):
            return self.to_wide(e) if self._needs_wide(e, in_index=True) else self._keep(e)
        return self.value(e)

    def value(self, e: E.PrimExpr) -> E.PrimExpr:
        """`e` with its dtype kept."""
        if _is_arith(e):
            return E.cast(self.to_wide(e), INDEX) if self._needs_wide(e, in_index=False) else self._keep(e)
        if isinstance(e, E.BufferLoad):
            return self._rebuilt(e, tuple(self.index(i) for i in e.indices))
        if isinstance(e, E.BufferPtr):
            return self._rebuilt(e, (self.index(e.offset),))
        if isinstance(e, E.Cast) and _is_arith(e.value) and self._needs_wide(e.value, in_index=False):
            return E.cast(self.to_wide(e.value), e.dtype)  # a position converted: convert its exact value
        if isinstance(e, E.BinaryOp) and e.op in E.COMPARISONS and e.a.dtype == INDEX:
            if any(_is_arith(x) and self._needs_wide(x, in_index=False) for x in (e.a, e.b)):
                return E.binary(e.op, self.to_wide(e.a), self.to_wide(e.b))  # compare positions in int64
        return self._rebuilt(e, tuple(self.value(k) for k in E.children(e)))

    def _keep(self, e: E.PrimExpr) -> E.PrimExpr:
        """Int32 arithmetic that cannot overflow, kept as it is; what it reads is rewritten."""
        if isinstance(e, (E.Var, E.IntImm)):
            return e
        if not _is_arith(e):
            return self.value(e)
        if isinstance(e, E.Select):
            return self._rebuilt(e, (self.value(e.cond), self._keep(e.true_value), self._keep(e.false_value)))
        return self._rebuilt(e, tuple(self._keep(k) for k in E.children(e)))

    def to_wide(self, e: E.PrimExpr) -> E.PrimExpr:
        """`e` (an int32 expression) computed in int64."""
        self.changed = True
        if isinstance(e, E.IntImm):
            return E.IntImm(e.value, WIDE)
        if isinstance(e, E.Var):
            return self.wide.get(id(e)) or E.cast(e, WIDE)
        if isinstance(e, E.BinaryOp) and e.op in ARITHMETIC:
            return E.binary(e.op, self.to_wide(e.a), self.to_wide(e.b))
        if isinstance(e, E.Select):
            return E.select(self.value(e.cond), self.to_wide(e.true_value), self.to_wide(e.false_value), e.guarded)
        if isinstance(e, E.UnaryOp) and e.op is E.UnOp.NEG:
            return E.neg(self.to_wide(e.a))
        if isinstance(e, E.Cast) and _integral(e.value.dtype) and fits(BoundsAnalysis(self.ranges)(e.value), INDEX):
            return E.cast(self.value(e.value), WIDE)  # the int32 cast never changed the value: skip it
        return E.cast(self.value(e), WIDE)  # data read at run time: its int32 value, widened

    def _rebuilt(self, e: E.PrimExpr, kids: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
        new = rebuild(e, kids)
        if new is not e:
            self.changed = True
        return new


def _integral(dtype: str) -> bool:
    return not dt.is_float(dtype) and dtype != "handle"


def _arith_nodes(e: E.PrimExpr) -> list[E.PrimExpr]:
    """The int32 arithmetic nodes that compute `e`, down to what it reads (loads, casts, calls)."""
    found: list[E.PrimExpr] = []
    stack = [e]
    while stack:
        n = stack.pop()
        if _is_arith(n):
            found.append(n)
            stack.extend(_operands(n))
    return found
