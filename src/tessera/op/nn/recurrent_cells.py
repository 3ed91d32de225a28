"""One time step of each recurrent cell (LSTM, GRU, RNN), as TIR and as NumPy.

The layer kernel (recurrent.py) projects the input (X·W^T, for all steps up
front or per step) and runs a loop over time whose body is the cell's `step`:
the recurrent matmul H·R^T into a small `gates` scratch, then the gate
arithmetic, fused per hidden unit. The state lives in
rows of the kernel's own result (see `StepContext`) and is updated in place:
unit j's new value depends only on unit j's old one once the matmul is done.

Gate order and formulas follow the ONNX operator specs (LSTM i, o, f, c with
peepholes i, o, f; GRU z, r, h; RNN one gate). `clip` bounds every gate's
pre-activation, as onnxruntime does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...tir import expr as E
from ...tir import stmt as S
from ...tir.buffer import Buffer
from .recurrent_activation import Activation, apply, apply_np


@dataclass(frozen=True)
class StepContext:
    """Buffers and indices of one step of one direction for batch row `n`.

    `out` is the kernel's result, [steps + states, dirs, batch, hidden]: rows
    0..steps-1 are Y, row `steps` the hidden state, row `steps + 1` the cell
    state (LSTM).
    """

    out: Buffer
    gates: Buffer  # [gates * hidden] scratch for one step's pre-activations
    xw: Buffer  # X·W^T for every step, or for this one (see `projected`)
    rt: Buffer  # [dirs, hidden, gates * hidden]: R transposed, so a gate row is contiguous
    b: Buffer  # [dirs, 2 * gates * hidden]: Wb then Rb
    p: Buffer | None  # [dirs, 3 * hidden] peepholes (LSTM)
    steps: int
    hidden: int
    d: int
    t: E.PrimExpr
    n: E.Var
    acts: tuple[Activation, ...]
    clip: float | None
    linear_before_reset: bool = False
    input_forget: bool = False

    @property
    def dtype(self) -> str:
        return self.out.dtype

    def load(self, buf: Buffer, *index: E.ExprLike) -> E.PrimExpr:
        return E.BufferLoad(buf, tuple(E.as_expr(i) for i in index), buf.dtype)

    def h(self, k: E.ExprLike) -> E.PrimExpr:
        return self.load(self.out, self.steps, self.d, self.n, k)

    def c(self, k: E.ExprLike) -> E.PrimExpr:
        return self.load(self.out, self.steps + 1, self.d, self.n, k)

    def gate(self, g: E.ExprLike) -> E.PrimExpr:
        return self.load(self.gates, g)

    def projected(self, g: E.ExprLike) -> E.PrimExpr:
        """X·W^T at this step for gate row g: computed for every step up front ([dirs, steps * batch,
        gates*hidden]), or for this step and batch row only ([gates*hidden])."""
        if len(self.xw.shape) == 1:
            return self.load(self.xw, g)
        batch = self.xw.shape[1] // self.steps
        return self.load(self.xw, self.d, E.add(E.mul(self.t, batch), self.n), g)

    def input_part(self, g: E.ExprLike, with_rb: bool = True) -> E.PrimExpr:
        """X·W^T plus Wb (and Rb) for gate row g."""
        total = E.add(self.projected(g), self.load(self.b, self.d, g))
        if with_rb:
            total = E.add(total, self.rb(g))
        return total

    def rb(self, g: E.ExprLike) -> E.PrimExpr:
        gh = self.gates.shape[0]
        return self.load(self.b, self.d, E.add(g, gh))

    def bound(self, v: E.PrimExpr) -> E.PrimExpr:
        if self.clip is None:
            return v
        return E.minimum(E.maximum(v, E.const(-self.clip, v.dtype)), E.const(self.clip, v.dtype))

    def act(self, k: int, v: E.PrimExpr) -> E.PrimExpr:
        return apply(self.acts[k], self.bound(v))

    def recurrent(self, first: int, count: int, init: Callable[[E.PrimExpr], E.PrimExpr],
                  state: Callable[[E.Var], E.PrimExpr]) -> S.Stmt:
        """gates[first + g] = init(g) + sum_k state(k) * R[d, first + g, k], for g < count."""
        return matvec_rows(self.gates, first, count, init, state, self.rt, self.d)

    def per_unit(self, count: int, body: Callable[[E.Var], S.Stmt]) -> S.Stmt:
        j = E.Var("j")
        return S.For(j, E.IntImm(count), body(j))

    def emit_h(self, j: E.Var, value: E.PrimExpr) -> S.Stmt:
        """The new hidden state of unit j: into the state row and into Y at this step."""
        return S.seq(S.BufferStore(self.out, value, (E.IntImm(self.steps), E.IntImm(self.d), self.n, j)),
                     S.BufferStore(self.out, self.h(j), (self.t, E.IntImm(self.d), self.n, j)))


def matvec_rows(dest: Buffer, first: int, count: int, init: Callable[[E.PrimExpr], E.PrimExpr],
                coeff: Callable[[E.Var], E.PrimExpr], matrix: Buffer, d: int) -> S.Stmt:
    """dest[first + g] = init(g) + sum_k coeff(k) * matrix[d, k, first + g], for g < count.

    k runs outside g: the inner loop streams a row of the (transposed)
    weight into `dest`, contiguous on both sides, which gcc vectorises
    without reassociating a sum (a per-row dot product would need
    -ffast-math, and small register tiles of rows get turned into shuffles).
    """
    g, k = E.Var("g"), E.Var("k")
    row = E.add(first, g)
    init_rows = S.For(g, E.IntImm(count), S.BufferStore(dest, init(g), (row,)))

    def accumulate(c_k: E.Var) -> S.Stmt:
        term = E.mul(c_k, E.BufferLoad(matrix, (E.IntImm(d), k, row), matrix.dtype))
        return S.For(g, E.IntImm(count), S.BufferStore(dest, E.add(E.BufferLoad(dest, (row,), dest.dtype), term),
                                                       (row,)))

    # coeff(k) bound once per k: it may read `dest` (GRU's reset gate), which the inner loop writes
    return S.seq(init_rows, S.For(k, E.IntImm(matrix.shape[1]), _let("c_k", coeff(k), accumulate)))


def _let(name: str, value: E.PrimExpr, body: Callable[[E.Var], S.Stmt]) -> S.Stmt:
    var = E.Var(name, value.dtype)
    return S.LetStmt(var, value, body(var))


# ---------------------------------------------------------------- RNN
def _rnn_step(cx: StepContext) -> S.Stmt:
    """Ht = f(Xt·W^T + Ht-1·R^T + Wb + Rb)."""
    h = cx.hidden
    return S.seq(
        cx.recurrent(0, h, cx.input_part, cx.h),
        cx.per_unit(h, lambda j: cx.emit_h(j, cx.act(0, cx.gate(j)))),
    )


# ---------------------------------------------------------------- GRU
def _gru_step(cx: StepContext) -> S.Stmt:
    """z, r = f(...); h~ = g(Xt·Wh^T + (r ⊙ Ht-1)·Rh^T + Rbh + Wbh), or with linear_before_reset
    g(Xt·Wh^T + r ⊙ (Ht-1·Rh^T + Rbh) + Wbh); Ht = (1 - z) ⊙ h~ + z ⊙ Ht-1."""
    h = cx.hidden
    zr = cx.per_unit(2 * h, lambda j: S.BufferStore(cx.gates, cx.act(0, cx.gate(j)), (j,)))
    if cx.linear_before_reset:
        hidden_part = cx.recurrent(2 * h, h, lambda g: cx.rb(E.add(2 * h, g)), cx.h)

        def candidate(j: E.Var) -> E.PrimExpr:
            reset = E.mul(cx.gate(E.add(h, j)), cx.gate(E.add(2 * h, j)))
            return cx.act(1, E.add(cx.input_part(E.add(2 * h, j), with_rb=False), reset))
    else:
        hidden_part = cx.recurrent(2 * h, h, lambda g: cx.input_part(E.add(2 * h, g)),
                                   lambda k: E.mul(cx.gate(E.add(h, k)), cx.h(k)))

        def candidate(j: E.Var) -> E.PrimExpr:
            return cx.act(1, cx.gate(E.add(2 * h, j)))

    def update(j: E.Var) -> S.Stmt:
        z = cx.gate(j)
        blend = E.add(E.mul(E.sub(E.const(1, z.dtype), z), candidate(j)), E.mul(z, cx.h(j)))
        return cx.emit_h(j, blend)

    return S.seq(cx.recurrent(0, 2 * h, cx.input_part, cx.h), zr, hidden_part, cx.per_unit(h, update))


# ---------------------------------------------------------------- LSTM
def _lstm_step(cx: StepContext) -> S.Stmt:
    """i, f = f(... + P ⊙ Ct-1); c~ = g(...); Ct = f ⊙ Ct-1 + i ⊙ c~; o = f(... + Po ⊙ Ct);
    Ht = o ⊙ h(Ct). With input_forget, f = 1 - i."""
    h = cx.hidden
    assert cx.p is not None
    p = cx.p

    def peep(k: int, j: E.Var, c: E.PrimExpr) -> E.PrimExpr:
        return E.mul(cx.load(p, cx.d, E.add(k * h, j)), c)

    def unit(j: E.Var) -> S.Stmt:
        c_prev = cx.c(j)

        def with_input(i: E.Var) -> S.Stmt:
            if cx.input_forget:
                forget = E.sub(E.const(1, i.dtype), i)
            else:
                forget = cx.act(0, E.add(cx.gate(E.add(2 * h, j)), peep(2, j, c_prev)))
            cell = cx.act(1, cx.gate(E.add(3 * h, j)))
            new_c = E.add(E.mul(forget, c_prev), E.mul(i, cell))

            def with_c(c: E.Var) -> S.Stmt:
                o = cx.act(0, E.add(cx.gate(E.add(h, j)), peep(1, j, c)))
                store_c = S.BufferStore(cx.out, c, (E.IntImm(cx.steps + 1), E.IntImm(cx.d), cx.n, j))
                return S.seq(store_c, cx.emit_h(j, E.mul(o, apply(cx.acts[2], c))))

            return _let("c_new", new_c, with_c)

        return _let("i_gate", cx.act(0, E.add(cx.gate(j), peep(0, j, c_prev))), with_input)

    return S.seq(cx.recurrent(0, 4 * h, cx.input_part, cx.h), cx.per_unit(h, unit))


# ---------------------------------------------------------------- NumPy twins
@dataclass(frozen=True)
class NpStep:
    """One step for all batch rows in NumPy: gates_x = Xt·W^T + Wb, already computed."""

    r: np.ndarray  # [gates * hidden, hidden] (as ONNX has it: the reference transposes back)
    rb: np.ndarray  # [gates * hidden]
    p: np.ndarray | None
    acts: tuple[Activation, ...]
    clip: float | None
    linear_before_reset: bool
    input_forget: bool

    def act(self, k: int, v: np.ndarray) -> np.ndarray:
        if self.clip is not None:
            v = np.clip(v, -self.clip, self.clip)
        return apply_np(self.acts[k], v)


def _np_rnn(st: NpStep, gx: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return st.act(0, gx + h @ st.r.T + st.rb), c


def _np_gru(st: NpStep, gx: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = h.shape[-1]
    zr = st.act(0, gx[:, :2 * n] + h @ st.r[:2 * n].T + st.rb[:2 * n])
    z, r = zr[:, :n], zr[:, n:]
    rh, rbh = st.r[2 * n:], st.rb[2 * n:]
    if st.linear_before_reset:
        cand = st.act(1, gx[:, 2 * n:] + r * (h @ rh.T + rbh))
    else:
        cand = st.act(1, gx[:, 2 * n:] + (r * h) @ rh.T + rbh)
    return (1 - z) * cand + z * h, c


def _np_lstm(st: NpStep, gx: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = h.shape[-1]
    pre = gx + h @ st.r.T + st.rb
    assert st.p is not None
    pi, po, pf = st.p[:n], st.p[n:2 * n], st.p[2 * n:]
    i = st.act(0, pre[:, :n] + pi * c)
    f = 1 - i if st.input_forget else st.act(0, pre[:, 2 * n:3 * n] + pf * c)
    new_c = f * c + i * st.act(1, pre[:, 3 * n:])
    o = st.act(0, pre[:, n:2 * n] + po * new_c)
    return o * apply_np(st.acts[2], new_c), new_c


# ---------------------------------------------------------------- the cells
StepBuilder = Callable[[StepContext], S.Stmt]
NpStepFn = Callable[[NpStep, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Cell:
    name: str
    gates: int  # gate blocks in W and R
    states: int  # 2 for LSTM (hidden and cell), else 1
    activations: int  # activation functions per direction
    default_activations: tuple[str, ...]
    step: StepBuilder
    np_step: NpStepFn


LSTM = Cell("lstm", 4, 2, 3, ("Sigmoid", "Tanh", "Tanh"), _lstm_step, _np_lstm)
GRU = Cell("gru", 3, 1, 2, ("Sigmoid", "Tanh"), _gru_step, _np_gru)
RNN = Cell("rnn", 1, 1, 1, ("Tanh",), _rnn_step, _np_rnn)
CELLS: Sequence[Cell] = (LSTM, GRU, RNN)
