"""An extern GEMM's elementwise tail, run by the GEMM on each finished tile of C.

A convolution or matrix product lowered to a microkernel call (`te.extern`)
is usually followed by a bias, an activation, a residual add: the chain of
elementwise stages that `lower` runs in place on the call's output, as a
second pass over all of C. That pass reads C back from memory after the
product wrote it (squeezenet's first layer writes 3.2 MB), and when the
product ran on two threads, the pass's thread reads the half of C that the
other core wrote, from that core's cache: on a 2-vCPU AMD EPYC (Zen 3), a
32x576x32 product took 10.7 us at two threads and 20.4 us with the serial
bias and ReLU pass after it, against 21.9 us for both at one thread.

So an extern that says where its calls put C (`GemmOutput`) may take the
tail into the call: `match_epilogue` reads the tail's expression as a short
program of steps (`Step`), each a C loop the GEMM runs over a tile right
after the tile's last K block, on the thread that computed it, while the
tile is in L1. The steps add an operand per row of C (a convolution's bias
per output channel), per column (a dense layer's bias), or per element (a
residual of C's layout); add or multiply a constant; and clamp to a constant
the way the tail's selects do (`v < c ? c : v`, NaN kept, as
`tir/clamp_select.py` writes ReLU, Clip and ReLU6). One step may be any
function of the running value alone (SiLU, GELU, hard-swish: `Step.MAP`):
it reaches the GEMM as the address of a loop over a tile that the kernel's
own unit defines from the tail's expression (`tir.expr.ElementMap`), so
it is the C the separate pass would run, with the polynomial exp, tanh and
erf of `codegen/c_fast_math.py`, vectorised by gcc. The order of the
operations is the tail's, so results are bit-identical; where gcc would
contract a multiply and an add across two steps into one FMA in the
separate pass (`x * c + y`, or a map ending in a product before an add),
the tail stays a separate pass, as does a tail with anything else.

The channel-blocked depthwise kernel (`codegen/c_depthwise.py`) takes the
same programs, a map only as the last step (`GemmOutput.map_last`): its C
is a block of channels by a plane's positions.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..tir import expr as E
from ..tir import stmt as S
from ..tir.buffer import Buffer
from ..tir.functor import map_expr, substitute, walk_expr
from .extern import pointer
from .tensor import IterVar, is_own_index


class Step(enum.IntEnum):
    """One operation of an epilogue on the running value v (the numbers are C's, see `c_gemm`)."""

    ADD_ROW = 1  # v += operand[row]
    ADD_COLUMN = 2  # v += operand[column]
    ADD_ELEMENT = 3  # v += operand[row * ldc + column] (an operand laid out as C)
    ADD_CONSTANT = 4  # v += constant
    MUL_CONSTANT = 5  # v *= constant
    CLAMP_LT = 6  # v = v < constant ? constant : v
    CLAMP_LE = 7
    CLAMP_GT = 8
    CLAMP_GE = 9
    MAP = 10  # v = f(v), f a function of v alone (GemmEpilogue.map), run over the tile by a function of the unit


# the steps every kernel that takes programs runs but maps
LINEAR_STEPS = frozenset(Step) - {Step.MAP}
STEP_BITS = 4  # each step is a nibble of the program word, the first step lowest
MAX_STEPS = 7  # nibbles of an int32 with the sign bit clear
MAX_OPERANDS = 2  # operand pointers a fused GEMM entry takes
MAX_CONSTANTS = 2  # float constants it takes

_OPERAND_STEPS = (Step.ADD_ROW, Step.ADD_COLUMN, Step.ADD_ELEMENT)
_CLAMPS = {E.BinOp.LT: Step.CLAMP_LT, E.BinOp.LE: Step.CLAMP_LE, E.BinOp.GT: Step.CLAMP_GT, E.BinOp.GE: Step.CLAMP_GE}
_MIRRORED = {E.BinOp.LT: E.BinOp.GT, E.BinOp.LE: E.BinOp.GE, E.BinOp.GT: E.BinOp.LT, E.BinOp.GE: E.BinOp.LE}


@dataclass(frozen=True, slots=True)
class GemmEpilogue:
    """A tail as steps on C: `operands` are the loads of the ADD_ROW/COLUMN/ELEMENT steps in step order,
    `constants` the values of the other steps in order; `axes` are the tail's loop variables, one per
    output axis, that the operand loads are written in."""

    steps: tuple[Step, ...]
    operands: tuple[E.BufferLoad, ...]
    constants: tuple[float, ...]
    axes: tuple[E.Var, ...]
    map: E.ElementMap | None = None  # the MAP step's function (a program has at most one)

    @property
    def program(self) -> int:
        """The steps as the fused entry's program word."""
        return sum(int(step) << (STEP_BITS * k) for k, step in enumerate(self.steps))

    def arguments(self, out_index: Sequence[E.ExprLike]) -> list[E.PrimExpr]:
        """The fused entry's trailing arguments for a call whose C starts at output element `out_index`:
        the program, MAX_OPERANDS operand pointers (0 where unused), MAX_CONSTANTS constants, the map (0 for
        none)."""
        at = {var: E.as_expr(i) for var, i in zip(self.axes, out_index)}
        pointers = [pointer(load.buffer, *(substitute(i, at) for i in load.indices)) for load in self.operands]
        return _program_arguments(self.program, pointers, self.constants, self.map)


def no_epilogue_arguments() -> list[E.PrimExpr]:
    """The trailing arguments of a kernel that always takes an epilogue program, for none (program 0)."""
    return _program_arguments(0, [], (), None)


def _program_arguments(program: int, pointers: list[E.PrimExpr], constants: Sequence[float],
                       element_map: E.ElementMap | None) -> list[E.PrimExpr]:
    """program, MAX_OPERANDS pointers, MAX_CONSTANTS constants and the map, the unused ones 0."""
    unused_constants = [E.FloatImm(0.0, "float32")] * (MAX_CONSTANTS - len(constants))
    return [E.IntImm(program), *pointers, *[E.IntImm(0)] * (MAX_OPERANDS - len(pointers)),
            *[E.FloatImm(v, "float32") for v in constants], *unused_constants,
            E.IntImm(0) if element_map is None else element_map]


FusedBody = Callable[[tuple[Buffer, ...], Buffer, GemmEpilogue], S.Stmt]


@dataclass(frozen=True, slots=True)
class GemmOutput:
    """Where an extern's GEMM calls put C in its output, and its body with an epilogue.

    Row r of C is the output's `row_axes` flattened (row-major), column j its `column_axes` flattened,
    C's leading dimension the column axes' extent, so C is dense in the output; the other axes are fixed
    per call. `fused_body(ins, out, epilogue)` is the extern's body calling the fused entries, each with
    `epilogue.arguments(index)` for the output index its C starts at. `steps` are those its kernel runs: a
    tail needing another stays a separate pass; with `map_last`, a map only as the program's last step."""

    row_axes: tuple[int, ...]
    column_axes: tuple[int, ...]
    fused_body: FusedBody
    steps: frozenset[Step] = frozenset(Step)
    map_last: bool = False


def match_epilogue(value: E.PrimExpr, out: Buffer, axes: Sequence[IterVar], layout: GemmOutput) -> GemmEpilogue | None:
    """`value`, a tail's expression for element `axes` of `out`, as steps on C; None when it is not one."""
    matcher = _Matcher(out, tuple(axes), layout)
    steps = matcher.steps(value)
    if steps is None or not steps or len(steps) > MAX_STEPS:
        return None
    operands = tuple(load for step, load in steps if isinstance(load, E.BufferLoad))
    constants = tuple(float(c.value) for _, c in steps if isinstance(c, E.FloatImm))
    maps = [m for _, m in steps if isinstance(m, E.ElementMap)]
    kinds = tuple(step for step, _ in steps)
    if not layout.steps.issuperset(kinds) or len(operands) > MAX_OPERANDS or len(constants) > MAX_CONSTANTS:
        return None
    if layout.map_last and Step.MAP in kinds[:-1]:
        return None
    if not _contracts_alike(kinds, maps[0] if maps else None):
        return None
    return GemmEpilogue(kinds, operands, constants, tuple(a.var for a in axes), maps[0] if maps else None)


_ADDS = (*_OPERAND_STEPS, Step.ADD_CONSTANT)


def _contracts_alike(kinds: tuple[Step, ...], element_map: E.ElementMap | None) -> bool:
    """Whether no multiply and add of two different steps would be one FMA in the separate pass: gcc
    contracts `x * c + y` there, while here every step rounds its result."""
    after_mul = kinds[kinds.index(Step.MUL_CONSTANT):] if Step.MUL_CONSTANT in kinds else ()
    if any(k in (*_ADDS, Step.MAP) for k in after_mul):
        return False  # a map may add to the product too
    if element_map is None:
        return True
    after_map = kinds[kinds.index(Step.MAP) + 1:]
    body = element_map.body
    ends_in_product = (isinstance(body, E.BinaryOp) and body.op is E.BinOp.MUL) or (
        isinstance(body, E.UnaryOp) and body.op is E.UnOp.NEG)  # (-(a * b) + c is one FMA too)
    return not (ends_in_product and any(k in _ADDS for k in after_map))


_Found = list[tuple[Step, "E.BufferLoad | E.FloatImm | E.ElementMap"]]


class _Matcher:
    def __init__(self, out: Buffer, axes: tuple[IterVar, ...], layout: GemmOutput) -> None:
        self.out, self.axes, self.layout = out, axes, layout

    def steps(self, e: E.PrimExpr, maps: bool = True) -> _Found | None:
        """The steps that turn C's element into `e`, innermost first (a MAP among them where `maps`)."""
        found = self._linear_steps(e, maps)
        if found is None and maps:
            return self._map(e)
        return found

    def _linear_steps(self, e: E.PrimExpr, maps: bool) -> _Found | None:
        if isinstance(e, E.BufferLoad) and e.buffer is self.out:
            return [] if is_own_index(e.indices, self.axes) else None
        if isinstance(e, E.Select) and not e.guarded:
            return self._clamp(e, maps)
        if isinstance(e, E.BinaryOp) and e.op in (E.BinOp.ADD, E.BinOp.MUL) and e.dtype == "float32":
            for running, other in ((e.a, e.b), (e.b, e.a)):  # a + b == b + a, bit for bit
                if not _reads(running, self.out):
                    continue
                inner = self.steps(running, maps)
                if inner is None:
                    continue
                step: tuple[Step, E.BufferLoad | E.FloatImm] | None = (
                    self._operand_step(other) if e.op is E.BinOp.ADD else None)
                if step is None and isinstance(other, E.FloatImm) and math.isfinite(other.value):
                    step = (Step.ADD_CONSTANT if e.op is E.BinOp.ADD else Step.MUL_CONSTANT, other)
                if step is not None:
                    return [*inner, step]
        return None

    def _map(self, e: E.PrimExpr) -> _Found | None:
        """`e` as f(r): r the largest part of it that is steps on C (C's own element, say, or C plus a bias),
        f reading nothing else but constants (a float32 function of r alone)."""
        if e.dtype != "float32":
            return None
        for running in dict.fromkeys(walk_expr(e)):  # each sub-expression once, largest first (pre-order)
            if running is e or running.dtype != "float32" or not _reads(running, self.out):
                continue
            inner = self.steps(running, maps=False)
            if inner is None:
                continue
            v = E.Var("v", "float32")
            body = map_expr(e, lambda n: v if n == running else None)
            if all(isinstance(n, (E.FloatImm, E.IntImm)) or n is v or _is_computation(n) for n in walk_expr(body)):
                return [*inner, (Step.MAP, E.ElementMap(v, body))]
        return None

    def _clamp(self, e: E.Select, maps: bool) -> _Found | None:
        cond = e.cond
        if not (isinstance(cond, E.BinaryOp) and cond.op in _CLAMPS and isinstance(e.true_value, E.FloatImm)):
            return None
        bound, running = e.true_value, e.false_value
        if math.isnan(bound.value) or bound.dtype != "float32":
            return None
        if cond.b == bound and cond.a == running:
            op = cond.op
        elif cond.a == bound and cond.b == running:
            op = _MIRRORED[cond.op]  # c > v is v < c
        else:
            return None
        inner = self.steps(running, maps)
        return None if inner is None else [*inner, (_CLAMPS[op], bound)]

    def _operand_step(self, e: E.PrimExpr) -> tuple[Step, E.BufferLoad] | None:
        if not isinstance(e, E.BufferLoad) or e.buffer is self.out or e.dtype != "float32":
            return None
        if e.buffer.shape == self.out.shape and is_own_index(e.indices, self.axes):
            return (Step.ADD_ELEMENT, e)
        for step, axes in ((Step.ADD_ROW, self.layout.row_axes), (Step.ADD_COLUMN, self.layout.column_axes)):
            if self._runs_along(e, axes):
                return (step, e)
        return None

    def _runs_along(self, load: E.BufferLoad, run: tuple[int, ...]) -> bool:
        """Whether `load` reads element (the flat index of `run`'s axes) of a contiguous vector: every axis
        of the run that varies indexes its own dimension whole, with the stride the run's flattening gives
        it, and every other index is a constant."""
        strides = _strides(load.buffer.shape)
        var_axis = {a.var: k for k, a in enumerate(self.axes)}
        used: dict[int, int] = {}  # output axis -> operand dimension
        for d, index in enumerate(load.indices):
            if isinstance(index, E.IntImm):
                continue
            axis = var_axis.get(index) if isinstance(index, E.Var) else None
            if axis is None or axis in used or axis not in run:
                return False
            used[axis] = d
        stride = 1
        for axis in reversed(run):
            extent = self.axes[axis].extent
            if extent > 1 and (axis not in used or strides[used[axis]] != stride):
                return False
            stride *= extent
        return bool(used)


def _reads(e: E.PrimExpr, buffer: Buffer) -> bool:
    return any(isinstance(n, E.BufferLoad) and n.buffer is buffer for n in walk_expr(e))


def _is_computation(e: E.PrimExpr) -> bool:
    """An operation a map may compute on its value: no load, no variable, no call of C (intrinsics only)."""
    if isinstance(e, E.Call):
        return not e.is_extern
    return isinstance(e, (E.BinaryOp, E.UnaryOp, E.Select, E.Cast))


def _strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return strides[::-1]
