"""TIR scalar expressions: index arithmetic and the values loops compute.

Nodes are small immutable values. `Var` compares by identity because it is a
binding site; every other node compares structurally. The arithmetic helpers
(`add`, `mul`, ... and the Python operators on `PrimExpr`) fold constants and
drop identities as they build, so index expressions stay readable in the C.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard, Union

import numpy as np

from .. import dtype as dt

if TYPE_CHECKING:
    from .buffer import Buffer


class PrimExpr:
    """Base of scalar expressions; every node has a `dtype`."""

    __slots__ = ()
    dtype: str

    def __add__(self, other: ExprLike) -> PrimExpr:
        return add(self, other)

    def __radd__(self, other: ExprLike) -> PrimExpr:
        return add(other, self)

    def __sub__(self, other: ExprLike) -> PrimExpr:
        return sub(self, other)

    def __rsub__(self, other: ExprLike) -> PrimExpr:
        return sub(other, self)

    def __mul__(self, other: ExprLike) -> PrimExpr:
        return mul(self, other)

    def __rmul__(self, other: ExprLike) -> PrimExpr:
        return mul(other, self)

    def __truediv__(self, other: ExprLike) -> PrimExpr:
        return binary(BinOp.DIV, self, other)

    def __floordiv__(self, other: ExprLike) -> PrimExpr:
        return floordiv(self, other)

    def __mod__(self, other: ExprLike) -> PrimExpr:
        return floormod(self, other)

    def __neg__(self) -> PrimExpr:
        return neg(self)


ExprLike = Union[PrimExpr, int, float, bool]


@dataclass(frozen=True, eq=False, slots=True)
class Var(PrimExpr):
    """A scalar variable (loop counter, let binding). Identity equality."""

    name: str
    dtype: str = "int32"

    def __repr__(self) -> str:
        return f"Var({self.name})"


@dataclass(frozen=True, slots=True)
class IntImm(PrimExpr):
    value: int
    dtype: str = "int32"


@dataclass(frozen=True, slots=True)
class FloatImm(PrimExpr):
    value: float
    dtype: str = "float32"


class BinOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # true division for floats, C (truncating) division for ints
    FLOORDIV = "//"
    FLOORMOD = "%"
    TRUNCMOD = "fmod"  # C's % for ints, fmod for floats
    MIN = "min"
    MAX = "max"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "&&"
    OR = "||"
    BITAND = "&"
    BITOR = "|"
    BITXOR = "^"
    SHL = "<<"
    SHR = ">>"
    POW = "pow"


COMPARISONS = frozenset({BinOp.EQ, BinOp.NE, BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE})
LOGICAL = frozenset({BinOp.AND, BinOp.OR})


@dataclass(frozen=True, slots=True)
class BinaryOp(PrimExpr):
    op: BinOp
    a: PrimExpr
    b: PrimExpr
    dtype: str


class UnOp(enum.Enum):
    NEG = "-"
    NOT = "!"
    BITNOT = "~"


@dataclass(frozen=True, slots=True)
class UnaryOp(PrimExpr):
    op: UnOp
    a: PrimExpr
    dtype: str


@dataclass(frozen=True, slots=True)
class Select(PrimExpr):
    """`cond ? true_value : false_value`; both sides may be evaluated, unless
    `guarded`: then only the chosen side is, so the other may read out of
    bounds (a padded read guarded by its bounds test)."""

    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str
    guarded: bool = False


@dataclass(frozen=True, slots=True)
class Cast(PrimExpr):
    value: PrimExpr
    dtype: str


@dataclass(frozen=True, slots=True)
class ProducerLoad(PrimExpr):
    """A read of a tensor-expression tensor; lowering turns it into a BufferLoad."""

    producer: object  # a te.Tensor; typed loosely so TIR does not depend on TE
    indices: tuple[PrimExpr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class BufferLoad(PrimExpr):
    buffer: "Buffer"
    indices: tuple[PrimExpr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class BufferPtr(PrimExpr):
    """The address of element `offset` (flat) of a buffer, for extern calls."""

    buffer: "Buffer"
    offset: PrimExpr
    dtype: str = "handle"


class Intrinsic(enum.Enum):
    """Math functions every code generator must provide."""

    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "nearbyint"  # round half to even, as ONNX and NumPy do
    FABS = "fabs"
    ISNAN = "isnan"
    ISINF = "isinf"
    ISFINITE = "isfinite"
    SIGNBIT = "signbit"
    ABS = "abs"  # integer absolute value
    # acc + sum of (int32)a[k] * (int32)b[k] for k < n; args (BufferPtr a, BufferPtr b, n, acc),
    # int8 runs and an int32 accumulator (made by tir/int8_dot.py)
    DOT_INT8 = "dot_int8"
    # a statement (void): adds the dot products of run a with runs b0 and b1 to the int32 scalars acc0 and
    # acc1 in place; args (BufferPtr a, BufferPtr b0, BufferPtr b1, n, acc0, acc1) with the accumulators
    # as loads of local scalars (made by tir/int8_dot_pairs.py)
    DOT2_INT8 = "dot2_int8"
    # a statement (void): adds the dot products of runs a and a + da (two positions) with runs b and b + db
    # (two weight rows) to four int32 scalars in place; args (BufferPtr a, da, BufferPtr b, db, n, acc00,
    # acc01, acc10, acc11), acc<position><row> loads of local scalars, da and db constants
    # (made by tir/int8_dot_quads.py)
    DOT2X2_INT8 = "dot2x2_int8"
    # a statement (void): adds the dot products of run a with the four runs b + k * db (k < 4) to four int32
    # scalars in place; args (BufferPtr a, BufferPtr b, db, n, acc0, acc1, acc2, acc3), the accumulators
    # loads of local scalars, db a constant (made by tir/int8_dot_rows.py)
    DOT4_INT8 = "dot4_int8"
    # a statement (void): adds sum of a[k] * b[k] and sum of a[k + 1] * b[k] (k < n: two adjacent columns
    # of a depthwise row) to two int32 scalars in place; args (BufferPtr a, BufferPtr b, n, acc0, acc1),
    # the accumulators loads of local scalars (made by tir/int8_dot_slides.py)
    DOT_SLIDE2_INT8 = "dot_slide2_int8"


@dataclass(frozen=True, slots=True)
class Call(PrimExpr):
    """A call of an intrinsic (`Intrinsic`) or of an extern C function (`str`)."""

    func: Union[Intrinsic, str]
    args: tuple[PrimExpr, ...]
    dtype: str

    @property
    def is_extern(self) -> bool:
        return isinstance(self.func, str)


@dataclass(frozen=True, slots=True)
class ElementMap(PrimExpr):
    """The address of a function that replaces each element of a block of `var.dtype` values with `body`,
    in which `var` is that element (and which reads nothing else but constants): an extern kernel's
    elementwise tail, handed to the kernel to run on each block of its output it finishes
    (te/gemm_epilogue.py). `var` is bound in `body` alone."""

    var: Var
    body: PrimExpr
    dtype: str = "handle"


# ---------------------------------------------------------------- builders

def const(value: ExprLike, dtype: str) -> PrimExpr:
    """An immediate of `dtype` (bool and ints as IntImm, floats as FloatImm)."""
    if isinstance(value, PrimExpr):
        return value if value.dtype == dtype else cast(value, dtype)
    if dt.is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


def as_expr(value: ExprLike, like: PrimExpr | None = None) -> PrimExpr:
    """Turn a Python number into an immediate, typed after `like` if given."""
    if isinstance(value, PrimExpr):
        return value
    if like is not None:
        return const(value, like.dtype)
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int):
        return IntImm(value, "int32")
    return FloatImm(float(value), "float32")


def is_const(e: PrimExpr, value: float | None = None) -> TypeGuard[IntImm | FloatImm]:
    if not isinstance(e, (IntImm, FloatImm)):
        return False
    return value is None or e.value == value


def _fold(op: BinOp, a: IntImm | FloatImm, b: IntImm | FloatImm, dtype: str) -> PrimExpr | None:
    x, y = a.value, b.value
    table: dict[BinOp, Callable[[], int | float | None]]  # None: do not fold (division by zero)
    if dt.is_float(a.dtype):
        table = {
            BinOp.ADD: lambda: x + y, BinOp.SUB: lambda: x - y, BinOp.MUL: lambda: x * y,
            BinOp.MIN: lambda: min(x, y), BinOp.MAX: lambda: max(x, y),
        }
    else:
        table = {
            BinOp.ADD: lambda: x + y, BinOp.SUB: lambda: x - y, BinOp.MUL: lambda: x * y,
            BinOp.MIN: lambda: min(x, y), BinOp.MAX: lambda: max(x, y),
            BinOp.FLOORDIV: lambda: x // y if y else None,
            BinOp.FLOORMOD: lambda: x % y if y else None,
        }
    table.update({
        BinOp.EQ: lambda: int(x == y), BinOp.NE: lambda: int(x != y), BinOp.LT: lambda: int(x < y),
        BinOp.LE: lambda: int(x <= y), BinOp.GT: lambda: int(x > y), BinOp.GE: lambda: int(x >= y),
    })
    if op not in table:
        return None
    value = table[op]()
    if value is None:
        return None
    if not dt.is_float(dtype) and dtype != "bool":
        if not (dt.min_value(dtype) <= value <= dt.max_value(dtype)):
            return None  # let C do the wrap-around rather than guessing it
    return const(value, dtype)


def binary(op: BinOp, a: ExprLike, b: ExprLike) -> PrimExpr:
    """Build `a op b`, folding constants and identities on index arithmetic."""
    if not isinstance(a, PrimExpr):
        a = as_expr(a, b if isinstance(b, PrimExpr) else None)
    if not isinstance(b, PrimExpr):
        b = as_expr(b, a)
    if a.dtype != b.dtype:
        raise TypeError(f"operands of {op.value} disagree: {a.dtype} vs {b.dtype}")
    dtype = "bool" if op in COMPARISONS or op in LOGICAL else a.dtype
    if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
        folded = _fold(op, a, b, dtype)
        if folded is not None:
            return folded
    simplified = _identity(op, a, b)
    if simplified is not None:
        return simplified
    return BinaryOp(op, a, b, dtype)


def _identity(op: BinOp, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    integral = not dt.is_float(a.dtype)
    if op is BinOp.ADD:
        if is_const(b, 0):
            return a
        if is_const(a, 0):
            return b
        # (x + c1) + c2 -> x + (c1 + c2): keeps unrolled offsets compact
        if integral and isinstance(b, IntImm) and isinstance(a, BinaryOp) and a.op is BinOp.ADD \
                and isinstance(a.b, IntImm):
            return binary(BinOp.ADD, a.a, a.b.value + b.value)
    elif op is BinOp.SUB:
        if is_const(b, 0):
            return a
    elif op is BinOp.MUL:
        if is_const(b, 1):
            return a
        if is_const(a, 1):
            return b
        if integral and (is_const(a, 0) or is_const(b, 0)):
            return const(0, a.dtype)
    elif op in (BinOp.FLOORDIV, BinOp.DIV) and integral:
        if is_const(b, 1):
            return a
    elif op is BinOp.FLOORMOD and integral:
        if is_const(b, 1):
            return const(0, a.dtype)
    return None


def add(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.ADD, a, b)


def sub(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.SUB, a, b)


def mul(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.MUL, a, b)


def div(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.DIV, a, b)


def floordiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.FLOORDIV, a, b)


def floormod(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.FLOORMOD, a, b)


def minimum(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.MIN, a, b)


def maximum(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.MAX, a, b)


def eq(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.EQ, a, b)


def ne(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.NE, a, b)


def lt(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.LT, a, b)


def le(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.LE, a, b)


def gt(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.GT, a, b)


def ge(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.GE, a, b)


def logical_and(a: ExprLike, b: ExprLike) -> PrimExpr:
    a, b = as_expr(a), as_expr(b)
    if is_const(a):
        return b if a.value else a
    if is_const(b):
        return a if b.value else b
    return binary(BinOp.AND, a, b)


def logical_or(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary(BinOp.OR, a, b)


def neg(a: PrimExpr) -> PrimExpr:
    if isinstance(a, (IntImm, FloatImm)):
        return const(-a.value, a.dtype)
    return UnaryOp(UnOp.NEG, a, a.dtype)


def logical_not(a: PrimExpr) -> PrimExpr:
    return UnaryOp(UnOp.NOT, a, "bool")


def select(cond: PrimExpr, true_value: ExprLike, false_value: ExprLike, guarded: bool = False) -> PrimExpr:
    if not isinstance(true_value, PrimExpr):
        true_value = as_expr(true_value, false_value if isinstance(false_value, PrimExpr) else None)
    if not isinstance(false_value, PrimExpr):
        false_value = as_expr(false_value, true_value)
    if is_const(cond):
        return true_value if cond.value else false_value
    return Select(cond, true_value, false_value, true_value.dtype, guarded)


def cast(value: ExprLike, dtype: str) -> PrimExpr:
    value = as_expr(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, (IntImm, FloatImm)):
        v = value.value
        if dtype == "bool":
            return IntImm(int(bool(v)), "bool")
        if dt.is_storage_only(dtype):  # float16 / bfloat16: the value rounded to the format
            return FloatImm(float(np.asarray(v, dtype=dt.to_numpy(dtype))), dtype)
        if dt.is_float(dtype):
            return FloatImm(float(v), dtype)
        if isinstance(v, float) and not math.isfinite(v):
            return Cast(value, dtype)
        iv = int(v)
        if dt.min_value(dtype) <= iv <= dt.max_value(dtype):
            return IntImm(iv, dtype)
    return Cast(value, dtype)


def call(func: Intrinsic | str, args: Sequence[PrimExpr], dtype: str) -> PrimExpr:
    return Call(func, tuple(args), dtype)


def children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """Direct sub-expressions of `e`, in evaluation order."""
    if isinstance(e, BinaryOp):
        return (e.a, e.b)
    if isinstance(e, UnaryOp):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.true_value, e.false_value)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, (BufferLoad, ProducerLoad)):
        return e.indices
    if isinstance(e, Call):
        return e.args
    if isinstance(e, BufferPtr):
        return (e.offset,)
    if isinstance(e, ElementMap):
        return (e.body,)
    return ()
