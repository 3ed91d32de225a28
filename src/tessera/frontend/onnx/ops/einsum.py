"""ONNX Einsum, lowered at import to transposes, reshapes, sums, gathers and matmuls.

No Einsum op exists in Relay: every equation becomes operators tessera
already schedules well, so an attention block's "bhid,bhjd->bhij" is one
batched `nn.matmul` against a transposed operand.

The lowering, after parsing (`parse_equation`):

1. a label repeated within one operand ("ii", a diagonal) becomes one axis:
   the repeated axes are merged by a reshape and their diagonal taken with
   a constant-index `take`;
2. a size-1 axis whose label is larger elsewhere is squeezed out, since
   it broadcasts (NumPy's rule, which ONNX follows for ellipsis dims);
3. operands are contracted left to right. For each pair, labels neither
   the output nor a later operand needs are summed first; the rest are
   grouped as batch (both operands, still needed), left-only, contracted
   (both, no longer needed) and right-only, and the pair becomes
   `matmul(left (batch, M, K), right (batch, K, N))`;
4. the labels left that the output lacks are summed, and a transpose puts
   the output in the equation's order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ....op import reduce as red
from ....op import transform as tf
from ....op import transform_gather as tg
from ....op.nn import matmul as mm
from ....relay.expr import Constant, Expr
from ..importer import ImportContext, Node
from ..registry import converter

ELLIPSIS = "..."


@dataclass(frozen=True, slots=True)
class Equation:
    """A parsed equation: the labels of each input and of the output.

    Ellipsis dims are expanded into labels "...0", "...1" (right-aligned,
    so operands with fewer ellipsis dims broadcast as NumPy's do)."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]


def _terms(text: str) -> list[str]:
    """Split a term into labels: single letters and the ellipsis."""
    labels, k = [], 0
    while k < len(text):
        if text.startswith(ELLIPSIS, k):
            if ELLIPSIS in labels:
                raise ValueError(f"term {text!r} has more than one ellipsis")
            labels.append(ELLIPSIS)
            k += len(ELLIPSIS)
        elif text[k].isascii() and text[k].isalpha():
            labels.append(text[k])
            k += 1
        else:
            raise ValueError(f"term {text!r} has {text[k]!r}, expected letters and at most one '...'")
    return labels


def _expand(labels: list[str], ellipsis: tuple[str, ...]) -> tuple[str, ...]:
    if ELLIPSIS not in labels:
        return tuple(labels)
    k = labels.index(ELLIPSIS)
    return tuple(labels[:k]) + ellipsis + tuple(labels[k + 1:])


def parse_equation(equation: str, ranks: Sequence[int]) -> Equation:
    """Parse `equation` for inputs of the given ranks; ValueError says what is wrong.

    >>> parse_equation("bij,bjk->bik", [3, 3])
    Equation(inputs=(('b', 'i', 'j'), ('b', 'j', 'k')), output=('b', 'i', 'k'))
    >>> parse_equation("...ij,jk", [3, 2]).output
    ('...0', 'i', 'k')
    """
    text = "".join(equation.split())
    lhs, arrow, rhs = text.partition("->")
    terms = [_terms(t) for t in lhs.split(",")]
    if len(terms) != len(ranks):
        raise ValueError(f"it has {len(terms)} input terms, the node has {len(ranks)} inputs")
    n_ellipsis = 0
    for k, (labels, rank) in enumerate(zip(terms, ranks)):
        letters = len([label for label in labels if label != ELLIPSIS])
        if letters > rank or (ELLIPSIS not in labels and letters != rank):
            raise ValueError(f"term {k} has {letters} labels for an input of rank {rank}")
        if ELLIPSIS in labels:
            n_ellipsis = max(n_ellipsis, rank - letters)
    ellipsis = tuple(f"{ELLIPSIS}{k}" for k in range(n_ellipsis))
    inputs = []
    for labels, rank in zip(terms, ranks):
        own = rank - len([label for label in labels if label != ELLIPSIS])
        inputs.append(_expand(labels, ellipsis[n_ellipsis - own:] if own else ()))
    if arrow:
        out_terms = _terms(rhs)
        output = _expand(out_terms, ellipsis)
        if len(set(output)) != len(output):
            raise ValueError(f"output {rhs!r} repeats a label")
        missing = sorted(set(output) - {label for term in inputs for label in term})
        if missing:
            raise ValueError(f"output labels {missing} appear in no input")
    else:  # implicit mode: the labels used once, in alphabetical order, after the ellipsis dims
        counts: dict[str, int] = {}
        for term in inputs:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        output = ellipsis + tuple(sorted(c for c, n in counts.items() if n == 1 and not c.startswith(ELLIPSIS)))
    return Equation(tuple(inputs), output)


@dataclass(frozen=True, slots=True)
class _Operand:
    """An intermediate value and the label of each of its axes."""

    expr: Expr
    labels: tuple[str, ...]
    shape: tuple[int, ...]


def _reshape(x: _Operand, labels: tuple[str, ...], shape: tuple[int, ...]) -> _Operand:
    expr = x.expr if shape == x.shape else tf.reshape(x.expr, newshape=shape)
    return _Operand(expr, labels, shape)


def _permute(x: _Operand, labels: Sequence[str]) -> _Operand:
    axes = tuple(x.labels.index(label) for label in labels)
    if axes == tuple(range(len(axes))):
        return x
    return _Operand(tf.transpose(x.expr, axes=axes), tuple(labels), tuple(x.shape[a] for a in axes))


def _sum_out(x: _Operand, drop: set[str]) -> _Operand:
    axes = tuple(k for k, label in enumerate(x.labels) if label in drop)
    if not axes:  # an empty axes tuple would reduce every axis
        return x
    keep = [k for k in range(len(x.labels)) if k not in axes]
    return _Operand(red.sum(x.expr, axes=axes, keepdims=False), tuple(x.labels[k] for k in keep),
                    tuple(x.shape[k] for k in keep))


def _diagonal(x: _Operand) -> _Operand:
    """One axis per label: the diagonal of each repeated label."""
    while len(set(x.labels)) != len(x.labels):
        label = next(label for label in x.labels if x.labels.count(label) > 1)
        axes = [k for k, other in enumerate(x.labels) if other == label]
        sizes = {x.shape[k] for k in axes}
        if len(sizes) != 1:
            raise ValueError(f"label {label!r} has sizes {sorted(sizes)} within one input")
        n, times = sizes.pop(), len(axes)
        others = [k for k in range(len(x.labels)) if k not in axes]
        order = tuple(others + axes)  # the repeated axes last, by position (labels are not unique yet)
        moved = x
        if order != tuple(range(len(order))):
            moved = _Operand(tf.transpose(x.expr, axes=order), tuple(x.labels[k] for k in order),
                             tuple(x.shape[k] for k in order))
        rest_labels = tuple(x.labels[k] for k in others)
        rest_shape = tuple(x.shape[k] for k in others)
        flat = _reshape(moved, rest_labels + (label,), rest_shape + (n ** times,))
        stride = sum(n ** p for p in range(times))  # index (i, i, ..., i) of the merged axis
        index = Constant(np.arange(n, dtype=np.int64) * stride)
        x = _Operand(tg.take(flat.expr, index, axis=len(others)), rest_labels + (label,), rest_shape + (n,))
    return x


def _squeeze_broadcast(x: _Operand, sizes: dict[str, int]) -> _Operand:
    """Drop size-1 axes whose label is larger in another operand: they broadcast."""
    keep = [k for k, label in enumerate(x.labels) if not (x.shape[k] == 1 and sizes[label] > 1)]
    if len(keep) == len(x.labels):
        return x
    return _reshape(x, tuple(x.labels[k] for k in keep), tuple(x.shape[k] for k in keep))


def _contract(a: _Operand, b: _Operand, needed: set[str]) -> _Operand:
    """The product of two operands, summed over the labels no longer `needed`."""
    a = _sum_out(a, set(a.labels) - set(b.labels) - needed)
    b = _sum_out(b, set(b.labels) - set(a.labels) - needed)
    size = dict(zip(a.labels + b.labels, a.shape + b.shape))
    batch = [label for label in a.labels if label in b.labels and label in needed]
    summed = [label for label in a.labels if label in b.labels and label not in needed]
    left = [label for label in a.labels if label not in b.labels]
    right = [label for label in b.labels if label not in a.labels]
    batch_shape = tuple(size[label] for label in batch)

    def group(labels: list[str]) -> int:
        return math.prod(size[label] for label in labels)

    # batch dims stay separate (matmul takes any number); each other group becomes one axis
    lhs = _permute(a, batch + left + summed)
    lhs = _reshape(lhs, lhs.labels, batch_shape + (group(left), group(summed)))
    rhs = _permute(b, batch + summed + right)
    rhs = _reshape(rhs, rhs.labels, batch_shape + (group(summed), group(right)))
    product = mm.matmul(lhs.expr, rhs.expr)
    labels = tuple(batch + left + right)
    out_shape = tuple(size[label] for label in labels)
    return _reshape(_Operand(product, labels, batch_shape + (group(left), group(right))), labels, out_shape)


def lower_einsum(eq: Equation, operands: Sequence[Expr], shapes: Sequence[tuple[int, ...]]) -> Expr:
    sizes: dict[str, int] = {}
    for labels, shape in zip(eq.inputs, shapes):
        for label, n in zip(labels, shape):
            if n != 1 and sizes.get(label, 1) not in (1, n):
                raise ValueError(f"label {label!r} has sizes {sizes[label]} and {n}")
            sizes[label] = max(sizes.get(label, 1), n)
    values = [_squeeze_broadcast(_diagonal(_Operand(e, labels, tuple(shape))), sizes)
              for e, labels, shape in zip(operands, eq.inputs, shapes)]
    result = values[0]
    for k, value in enumerate(values[1:], start=1):
        needed = set(eq.output).union(*(v.labels for v in values[k + 1:]))
        result = _contract(result, value, needed)
    result = _sum_out(result, set(result.labels) - set(eq.output))
    present = [label for label in eq.output if label in result.labels]
    result = _permute(result, present)
    if len(present) != len(eq.output):  # output labels every operand broadcast (all size 1)
        result = _reshape(result, eq.output, tuple(sizes[label] for label in eq.output))
    return result.expr


@converter("Einsum", since=12)
def einsum(node: Node, ctx: ImportContext) -> Expr:
    equation = str(node.attr("equation"))
    operands = [node.input(k) for k in range(len(node.inputs))]
    shapes = [ctx.shape_of(x) for x in operands]
    try:
        eq = parse_equation(equation, [len(s) for s in shapes])
        return lower_einsum(eq, operands, shapes)
    except ValueError as err:
        raise node.error(f"cannot lower equation {equation!r}: {err}") from None


__all__ = ["Equation", "lower_einsum", "parse_equation"]
