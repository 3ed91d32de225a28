"""Recurrent layers: `nn.lstm`, `nn.gru` and `nn.rnn` (ONNX LSTM, GRU, RNN).

One op is one layer, all directions. Its kernel is a loop over time, not
the steps unrolled, so the code is the same size for 10 steps or 10,000:

1. the input projection X·W^T. The input does not depend on the state, so
   on a host it is one matmul over all steps up front (the tuned matmul
   kernel's stages); on a Cortex-M, where RAM is short and there are no
   vectors to feed, it is done per step into a `gates`-sized scratch
   instead of a buffer of steps x gates;
2. an extern stage whose TIR body runs, per step and batch row, the cell's
   fused step (recurrent_cells.py). Steps at or past a row's
   `sequence_lens` leave the state alone and write zeros to Y (a row of
   length 0 ends with zero states, as in onnxruntime);
3. Y, Y_h (and Y_c) are copied out of the extern's rows.

Inputs (every optional ONNX input supplied by the importer): X [seq,
batch, input], WT [dirs, input, gates*hidden] and RT [dirs, hidden,
gates*hidden] (W and R transposed, so a gate row is contiguous; constant
folding does it once for weights), B [dirs, 2*gates*hidden], sequence_lens
[batch] (int32), initial_h [dirs, batch, hidden], and for LSTM initial_c
[dirs, batch, hidden] and P [dirs, 3*hidden]. Outputs: Y [seq, dirs,
batch, hidden], Y_h [dirs, batch, hidden], and for LSTM Y_c.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ... import dtype as dt
from ... import te
from ...crt.status import Status
from ...errors import InvalidValueError, TypeInferenceError
from ...relay.ty import TensorType, TupleType, Type
from ...target.target import Target
from ...te.extern import ExternBody
from ...tir import expr as E
from ...tir import stmt as S
from ...tir.buffer import Buffer
from .._util import as_tensor
from ..registry import Compute, Op, OpPattern, Reference, TypeRelation, register_op
from ..schedule_context import ScheduleContext
from .recurrent_activation import Activation
from .matmul import matmul
from .recurrent_cells import GRU, LSTM, RNN, Cell, NpStep, StepContext, matvec_rows


class Direction(enum.Enum):
    FORWARD = "forward"
    REVERSE = "reverse"
    BIDIRECTIONAL = "bidirectional"

    @property
    def count(self) -> int:
        return 2 if self is Direction.BIDIRECTIONAL else 1

    def reversed(self, d: int) -> bool:
        """Whether direction index `d` runs from the last step to the first."""
        return self is Direction.REVERSE or (self is Direction.BIDIRECTIONAL and d == 1)


@dataclass(frozen=True)
class RecurrentAttrs:
    hidden_size: int
    direction: Direction = Direction.FORWARD
    activations: tuple[Activation, ...] = ()  # the cell's functions for direction 0, then for direction 1
    clip: float | None = None  # bound on every gate's pre-activation
    linear_before_reset: bool = False  # GRU: apply the reset gate after the recurrent matmul
    input_forget: bool = False  # LSTM: couple the forget gate to the input gate (f = 1 - i)


def _input_names(cell: Cell) -> tuple[str, ...]:
    names = ("X", "WT", "RT", "B", "sequence_lens", "initial_h")
    return names + ("initial_c", "P") if cell is LSTM else names


def _type_rel(cell: Cell) -> TypeRelation:
    def rel(types: tuple[Type, ...], attrs: RecurrentAttrs) -> Type:
        names = _input_names(cell)
        if len(types) != len(names):
            raise TypeInferenceError(f"nn.{cell.name} takes {len(names)} inputs ({', '.join(names)}), "
                                     f"got {len(types)}")
        ts = [as_tensor(t, f"nn.{cell.name} {n}") for t, n in zip(types, names)]
        x = ts[0]
        if x.ndim != 3 or not dt.is_float(x.dtype):
            raise TypeInferenceError(f"nn.{cell.name} X must be a float [seq, batch, input] tensor, got {x}")
        seq, batch, width = x.shape
        dirs, hidden, gh = attrs.direction.count, attrs.hidden_size, cell.gates * attrs.hidden_size
        expected = [x.shape, (dirs, width, gh), (dirs, hidden, gh), (dirs, 2 * gh), (batch,), (dirs, batch, hidden),
                    (dirs, batch, hidden), (dirs, 3 * hidden)]
        for t, name, shape in zip(ts, names, expected):
            want = "int32" if name == "sequence_lens" else x.dtype
            if t.shape != shape or t.dtype != want:
                raise TypeInferenceError(f"nn.{cell.name} {name}: got {t}, expected {want}{list(shape)}")
        if len(attrs.activations) != dirs * cell.activations:
            raise TypeInferenceError(f"nn.{cell.name} needs {dirs * cell.activations} activations "
                                     f"({cell.activations} per direction), got {len(attrs.activations)}")
        state = TensorType((dirs, batch, hidden), x.dtype)
        return TupleType((TensorType((seq, dirs, batch, hidden), x.dtype), *[state] * cell.states))

    return rel


def _direction_acts(cell: Cell, attrs: RecurrentAttrs, d: int) -> tuple[Activation, ...]:
    return attrs.activations[d * cell.activations:(d + 1) * cell.activations]


def _lengths_in_range(shapes: list[tuple[int, ...]], values: list[np.ndarray | None], attrs: object) -> None:
    """A sequence length lies in [0, steps], as for ReverseSequence."""
    lens, steps = values[4], shapes[0][0]
    if lens is None:
        return
    bad = (np.asarray(lens) < 0) | (np.asarray(lens) > steps)
    if bad.any():
        raise InvalidValueError(f"sequence length {np.asarray(lens)[bad].flat[0]} is out of range for "
                                f"{steps} steps (valid: 0..{steps})")


# ------------------------------------------------------------------ reference
def _reference(cell: Cell) -> Reference:
    def ref(args: list[np.ndarray], attrs: RecurrentAttrs) -> tuple[np.ndarray, ...]:
        _lengths_in_range([a.shape for a in args], list(args), attrs)
        x, wt, rt, b, lens, h0 = args[:6]
        c0, p = (args[6], args[7]) if cell is LSTM else (np.zeros_like(h0), None)
        xw = np.einsum("tnk,dkg->dtng", x, wt)
        dirs, seq, batch, gh = xw.shape
        hidden = attrs.hidden_size
        y = np.zeros((seq, dirs, batch, hidden), x.dtype)
        y_h, y_c = h0.copy(), c0.copy()
        for d in range(dirs):
            step = NpStep(rt[d].T, b[d, gh:], None if p is None else p[d], _direction_acts(cell, attrs, d),
                          attrs.clip, attrs.linear_before_reset, attrs.input_forget)
            h, c = h0[d], c0[d]
            order = range(seq - 1, -1, -1) if attrs.direction.reversed(d) else range(seq)
            for t in order:
                valid = (t < lens)[:, None]
                new_h, new_c = cell.np_step(step, xw[d, t] + b[d, :gh], h, c)
                h, c = np.where(valid, new_h, h), np.where(valid, new_c, c)
                y[t, d] = np.where(valid, new_h, 0)
            started = (lens > 0)[:, None]  # a row of length 0 ends with zero state
            y_h[d], y_c[d] = np.where(started, h, 0), np.where(started, c, 0)
        return (y, y_h, y_c)[:1 + cell.states]

    return ref


# ------------------------------------------------------------------ kernel
def _layer_body(cell: Cell, attrs: RecurrentAttrs, seq: int, batch: int, per_step: bool) -> ExternBody:
    """The time loops; the extern's inputs are (X, WT) when it projects per step, else the projection."""
    hidden = attrs.hidden_size
    gh = cell.gates * hidden

    def body(ins: tuple[Buffer, ...], out: Buffer) -> S.Stmt:
        split = 2 if per_step else 1
        source, rest = ins[:split], ins[split:]
        rt, b, lens, h0 = rest[:4]
        c0, p = (rest[4], rest[5]) if cell is LSTM else (None, None)
        gates = Buffer(f"{cell.name}_gates", (gh,), out.dtype)
        xw = Buffer(f"{cell.name}_projection", (gh,), out.dtype) if per_step else source[0]
        parts: list[S.Stmt] = []
        for d in range(attrs.direction.count):
            n_ax, j_ax, s_ax = te.axis(batch, "n"), te.axis(hidden, "j"), te.axis(seq, "s")
            n, j = n_ax.var, j_ax.var
            t = E.sub(seq - 1, s_ax.var) if attrs.direction.reversed(d) else s_ax.var
            init = [S.BufferStore(out, E.BufferLoad(src, (E.IntImm(d), n, j), src.dtype),
                                  (E.IntImm(seq + row), E.IntImm(d), n, j))
                    for row, src in enumerate((h0, c0)) if src is not None]
            parts.append(te.loop_nest([n_ax, j_ax], S.seq(*init)))
            cx = StepContext(out, gates, xw, rt, b, p, seq, hidden, d, t, n, _direction_acts(cell, attrs, d),
                             attrs.clip, attrs.linear_before_reset, attrs.input_forget)
            step = cell.step(cx)
            if per_step:
                x, wt = source
                step = S.seq(matvec_rows(xw, 0, gh, lambda g: E.const(0, out.dtype),
                                         lambda k: E.BufferLoad(x, (t, n, k), x.dtype), wt, d), step)
            zero_ax = te.axis(hidden, "j")
            skipped = te.loop_nest([zero_ax], S.BufferStore(out, E.const(0, out.dtype),
                                                            (t, E.IntImm(d), n, zero_ax.var)))
            valid = E.lt(t, E.BufferLoad(lens, (n,), lens.dtype))
            # time outermost: each step needs the whole previous state of its batch row
            parts.append(te.loop_nest([s_ax, n_ax], S.IfThenElse(valid, step, skipped)))
        body = S.Allocate(gates, S.seq(*parts))
        return S.Allocate(xw, body) if per_step else body

    return body


def projects_per_step(target: Target) -> bool:
    """Whether the kernel projects the input step by step (Cortex-M) rather than for all steps up front."""
    return str(target.get("mcpu") or "").startswith("cortex-m")


def _compute(cell: Cell) -> Compute:
    def compute(inputs: list[te.Tensor], attrs: RecurrentAttrs, out: TupleType,
                sched: ScheduleContext) -> tuple[te.Tensor, ...]:
        x, wt = inputs[0], inputs[1]
        seq, batch, width = x.shape
        dirs, hidden, gh = attrs.direction.count, attrs.hidden_size, cell.gates * attrs.hidden_size
        # the lengths pass through a checked copy, so a kernel given one out of range fails before it starts
        ok = te.check((batch,), lambda n: E.logical_and(E.ge(inputs[4][n], E.const(0, "int32")),
                                                        E.le(inputs[4][n], E.const(seq, "int32"))),
                      Status.INDEX_OUT_OF_RANGE)
        lens = te.compute((batch,), lambda n: inputs[4][n], name=f"{cell.name}_lengths", checks=(ok,))
        per_step = projects_per_step(sched.target)
        if per_step:
            source = [x, wt]
        else:  # [seq*batch, input] · [dirs, input, gates*hidden] with the matmul op's own stages
            rows = te.compute((seq * batch, width), lambda r, k: x[E.floordiv(r, batch), E.floormod(r, batch), k],
                              name=f"{cell.name}_rows")
            assert matmul.compute is not None
            xw = matmul.compute([rows, wt], None, TensorType((dirs, seq * batch, gh), x.dtype), sched)
            source = [xw]
        state = te.extern((seq + cell.states, dirs, batch, hidden), [*source, *inputs[2:4], lens, *inputs[5:]],
                          _layer_body(cell, attrs, seq, batch, per_step), name=f"{cell.name}_layer",
                          dtype=x.dtype)
        y = te.compute((seq, dirs, batch, hidden), lambda t, d, n, j: state[t, d, n, j], name=f"{cell.name}_y")

        def final(row: int) -> te.Tensor:
            # a row of length 0 ends with zero state, not its initial one, as in onnxruntime
            return te.compute((dirs, batch, hidden), lambda d, n, j: E.select(
                E.gt(lens[n], E.const(0, "int32")), state[seq + row, d, n, j], E.const(0, x.dtype)),
                name=f"{cell.name}_final{row}")

        finals = tuple(final(row) for row in range(cell.states))
        return (y, *finals)

    return compute


def _register(cell: Cell) -> Op:
    return register_op(
        f"nn.{cell.name}", type_rel=_type_rel(cell), reference=_reference(cell), pattern=OpPattern.OPAQUE,
        compute=_compute(cell), attrs=RecurrentAttrs, num_inputs=len(_input_names(cell)), validate=_lengths_in_range,
        doc=f"One {cell.name.upper()} layer over a whole sequence (ONNX {cell.name.upper()}): Y, Y_h"
            + (", Y_c" if cell is LSTM else "") + ".",
    )


lstm = _register(LSTM)
gru = _register(GRU)
rnn = _register(RNN)
