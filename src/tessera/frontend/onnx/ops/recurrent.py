"""Converters for the recurrent layers LSTM, GRU and RNN.

Each node becomes one `nn.lstm` / `nn.gru` / `nn.rnn` call (a loop over
time, see op/nn/recurrent.py) with every optional input made explicit: zero
bias, state and peepholes, and `sequence_lens` set to the full length. W and
R are transposed so a gate row is contiguous; for weights, constant folding
does that once at compile time. Layout 1 (batch first, opset 14) is
transposes around the call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....op import elemwise as ew
from ....op import transform as tf
from ....op.nn import recurrent as rec
from ....op.nn.recurrent_activation import ALPHA_DEFAULTS, BETA_DEFAULTS, Activation, parse_kind
from ....op.nn.recurrent_cells import GRU, LSTM, RNN, Cell
from ....op.registry import Op
from ....relay.expr import Constant, Expr, TupleGetItem
from ..importer import ImportContext, Node
from ..registry import converter

_BATCH_FIRST = (1, 0, 2)  # [batch, seq|dirs, ...] <-> [seq|dirs, batch, ...]
_Y_BATCH_FIRST = (2, 0, 1, 3)  # Y [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]
_SWAP_LAST = (0, 2, 1)  # W, R [dirs, gates*hidden, k] -> [dirs, k, gates*hidden]


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def activations(node: Node, cell: Cell, dirs: int) -> tuple[Activation, ...]:
    """The node's activation functions for every direction, alpha and beta filled in.

    `activation_alpha`/`activation_beta` are consumed in order by the
    functions that take them; a function past the end of a list gets its
    operator's default.
    """
    names = [_text(a) for a in node.attr("activations", [])] or list(cell.default_activations) * dirs
    if len(names) == cell.activations and dirs == 2:
        names = names * 2  # one set given for both directions
    if len(names) != cell.activations * dirs:
        raise node.error(f"activations: expected {cell.activations * dirs} functions "
                         f"({cell.activations} per direction), got {names}")
    alphas = [float(a) for a in node.attr("activation_alpha", [])]
    betas = [float(b) for b in node.attr("activation_beta", [])]
    result = []
    for name in names:
        try:
            kind = parse_kind(name)
        except ValueError as err:
            raise node.error(str(err)) from None
        alpha = alphas.pop(0) if kind in ALPHA_DEFAULTS and alphas else ALPHA_DEFAULTS.get(kind, 0.0)
        beta = betas.pop(0) if kind in BETA_DEFAULTS and betas else BETA_DEFAULTS.get(kind, 0.0)
        result.append(Activation(kind, alpha, beta))
    return tuple(result)


def _or_zeros(given: Expr | None, shape: Sequence[int], dtype: str) -> Expr:
    """An optional input, zeros when absent (the ONNX default of bias, states and peepholes)."""
    return given if given is not None else Constant(np.zeros(tuple(shape), dtype))


def _layer(node: Node, ctx: ImportContext, cell: Cell, op: Op) -> list[Expr]:
    batch_first = int(node.attr("layout", 0)) == 1
    x, w, r = node.input(0), node.input(1), node.input(2)

    def state(k: int) -> Expr | None:
        given = node.optional_input(k)
        return tf.transpose(given, axes=_BATCH_FIRST) if given is not None and batch_first else given

    if batch_first:
        x = tf.transpose(x, axes=_BATCH_FIRST)
    seq, batch, width = ctx.shape_of(x)
    dtype = ctx.dtype_of(x)
    w_shape = ctx.shape_of(w)
    hidden = int(node.attr("hidden_size", w_shape[1] // cell.gates))
    if w_shape[0] not in (1, 2) or w_shape[2] != width:
        raise node.error(f"W has shape {list(w_shape)}, expected [dirs, gates*hidden, {width}]")
    try:
        direction = rec.Direction(_text(node.attr("direction", "forward")))
    except ValueError:
        raise node.error(f"direction {node.attr('direction')!r} is not valid; expected one of "
                         f"{', '.join(d.value for d in rec.Direction)}") from None
    dirs, gh = direction.count, cell.gates * hidden
    lens = node.optional_input(4)
    if lens is None:
        lens = Constant(np.full((batch,), seq, np.int32))
    elif ctx.dtype_of(lens) != "int32":
        lens = ew.cast(lens, dtype="int32")
    states = (dirs, batch, hidden)
    inputs = [x, tf.transpose(w, axes=_SWAP_LAST), tf.transpose(r, axes=_SWAP_LAST),
              _or_zeros(node.optional_input(3), (dirs, 2 * gh), dtype), lens, _or_zeros(state(5), states, dtype)]
    if cell is LSTM:
        inputs += [_or_zeros(state(6), states, dtype), _or_zeros(node.optional_input(7), (dirs, 3 * hidden), dtype)]
    clip = node.attr("clip", None)
    # typed once here, so that the outputs share one call (typing each output alone would copy it)
    call = ctx.typed(op(*inputs, hidden_size=hidden, direction=direction,
                        activations=activations(node, cell, dirs),
                        clip=None if clip is None else float(clip),
                        linear_before_reset=bool(int(node.attr("linear_before_reset", 0))),
                        input_forget=bool(int(node.attr("input_forget", 0)))))
    outputs: list[Expr] = [TupleGetItem(call, k) for k in range(1 + cell.states)]
    if batch_first:
        outputs = [tf.transpose(outputs[0], axes=_Y_BATCH_FIRST),
                   *[tf.transpose(o, axes=_BATCH_FIRST) for o in outputs[1:]]]
    return outputs


# Opset 7 settled the attributes these converters read (earlier versions had
# `output_sequence`); opset 14 added `layout`, which defaults to the old behaviour.
@converter("LSTM", since=7)
def lstm(node: Node, ctx: ImportContext) -> list[Expr]:
    return _layer(node, ctx, LSTM, rec.lstm)


@converter("GRU", since=7)
def gru(node: Node, ctx: ImportContext) -> list[Expr]:
    return _layer(node, ctx, GRU, rec.gru)


@converter("RNN", since=7)
def rnn(node: Node, ctx: ImportContext) -> list[Expr]:
    return _layer(node, ctx, RNN, rec.rnn)
