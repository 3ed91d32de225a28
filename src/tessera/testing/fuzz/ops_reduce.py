"""Generators for reductions, arg-reductions, TopK, CumSum and softmax-likes.

Axes are given the way the model's opset wants them (attribute or input),
sometimes negative, sometimes left out (all axes). Index-valued results
(ArgMax, TopK, Hardmax) need exact inputs: a rounding difference would
move a tie. Rounding error grows with the number of elements reduced.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .graph import FLOATS, NUMERIC, GraphBuilder, Reject, Value
from .spec import exact_or, pick_axes, pick_axis, register

NO_U32_U64 = tuple(d for d in NUMERIC if d not in ("uint32", "uint64"))  # onnxruntime's reductions
Bounds = Callable[[Value, int], tuple[float, float]]


@dataclass(frozen=True)
class Reduction:
    op: str
    dtypes: tuple[str, ...]
    bounds: Bounds  # (input, elements per output) -> output bounds
    ulps: Callable[[int], float]  # rounding error for K elements
    axes_input_since: int = 18
    positive_input: bool = False  # a log of the result: the input must be > 0
    amp: float = 1.0

    def build(self, g: GraphBuilder, v: Value) -> list[Value]:
        if self.positive_input and not v.lo > 0:
            raise Reject(f"{self.op} needs positive input")
        attrs: dict[str, object] = {"keepdims": g.chooser.choice((0, 1))}
        inputs: list[Value | None] = [v]
        every = v.rank == 0 or g.chooser.boolean(0.2)
        axes = [] if every else pick_axes(g, v)
        if g.opset >= self.axes_input_since:
            if axes:
                inputs.append(g.ints(axes))
            elif g.chooser.boolean(0.3):
                attrs["noop_with_empty_axes"] = 1
        elif axes:
            attrs["axes"] = axes
        noop = attrs.get("noop_with_empty_axes") == 1
        reduced = [a % v.rank for a in axes] if axes else list(range(v.rank))
        k = 1 if noop else math.prod(v.shape[a] for a in reduced)
        if k == 0:
            if self.op == "ReduceMean":
                raise Reject("ReduceMean over an empty set is undefined in ONNX")
            lo, hi, finite = -math.inf, math.inf, False  # the identity of the combiner: inf for max/min
        else:
            lo, hi = self.bounds(v, k) if not noop else (v.lo, v.hi)
            finite = v.finite
        ulps = self.ulps(1) + (64 if self.op in ("ReduceLogSumExp", "ReduceLogSum", "ReduceL2") else 0) if noop \
            else self.ulps(k)  # noop: the elementwise part (log, exp, sqrt) still rounds
        return g.node(self.op, inputs, attrs, [{"lo": lo, "hi": hi, "finite": finite,
                                                "tol": exact_or(v.dtype, [v], ulps, self.amp)}])


def _sum(v: Value, k: int) -> tuple[float, float]:
    return min(k * v.lo, v.lo), max(k * v.hi, v.hi)


def _power(m: float, k: int) -> float:
    try:
        return m ** k
    except OverflowError:
        return math.inf


def _abs_max(v: Value) -> float:
    return max(abs(v.lo), abs(v.hi))


REDUCTIONS = (
    Reduction("ReduceSum", NO_U32_U64, _sum, lambda k: k + 2 if k > 1 else 0, axes_input_since=13),
    Reduction("ReduceMean", FLOATS + ("int32",), lambda v, k: (v.lo, v.hi), lambda k: k + 4),
    Reduction("ReduceMax", NO_U32_U64, lambda v, k: (v.lo, v.hi), lambda k: 0),
    Reduction("ReduceMin", NO_U32_U64, lambda v, k: (v.lo, v.hi), lambda k: 0),
    Reduction("ReduceProd", FLOATS + ("int32", "int64"), lambda v, k: (-_power(_abs_max(v), k), _power(_abs_max(v), k)),
              lambda k: 2 * k if k > 1 else 0),
    Reduction("ReduceL1", FLOATS + ("int32", "int64"), lambda v, k: (0.0, k * _abs_max(v)),
              lambda k: k + 2 if k > 1 else 0),
    Reduction("ReduceL2", FLOATS, lambda v, k: (0.0, math.sqrt(k) * _abs_max(v)), lambda k: k + 4),
    Reduction("ReduceSumSquare", FLOATS + ("int32", "int64"), lambda v, k: (0.0, k * _abs_max(v) ** 2),
              lambda k: k + 2),
    Reduction("ReduceLogSum", FLOATS, lambda v, k: (math.log(k * v.lo), math.log(k * v.hi)), lambda k: k + 64,
              positive_input=True),
    Reduction("ReduceLogSumExp", FLOATS, lambda v, k: (v.lo, v.hi + math.log(k)), lambda k: k + 64, amp=16.0),
)

for _r in REDUCTIONS:
    register(_r.op, "reduce", dtypes=_r.dtypes)(_r.build)


def _arg(op: str) -> None:
    @register(op, "reduce", dtypes=FLOATS + ("int8", "uint8", "int32", "int64"), needs_exact=True, min_rank=1)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        axis = pick_axis(g, v)
        if v.shape[axis] == 0:
            raise Reject("arg-reduction over an empty axis")
        attrs = {"axis": axis, "keepdims": g.chooser.choice((0, 1))}
        if g.opset >= 12:
            attrs["select_last_index"] = g.chooser.choice((0, 1))
        return g.node(op, [v], attrs, [{"lo": 0, "hi": v.shape[axis] - 1, "finite": True}])


_arg("ArgMax")
_arg("ArgMin")


@register("TopK", "reduce", dtypes=FLOATS + ("int32", "int64"), needs_exact=True, min_rank=1)
def _topk(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    n = v.shape[axis]
    if n == 0:
        raise Reject("TopK of an empty axis")
    k = g.chooser.integer(1, n)
    attrs = {"axis": axis, "largest": g.chooser.choice((0, 1)), "sorted": 1}
    return g.node("TopK", [v, g.ints([k])], attrs,
                  [{"lo": v.lo, "hi": v.hi, "finite": True}, {"lo": 0, "hi": n - 1, "finite": True}])


@register("CumSum", "reduce", dtypes=FLOATS + ("int32", "int64"), min_rank=1, min_opset=11)
def _cumsum(g: GraphBuilder, v: Value) -> list[Value]:
    axis = pick_axis(g, v)
    dtype = g.chooser.choice(("int64", "int32"))
    axis_value = g.scalar(axis, dtype) if g.chooser.boolean() else g.ints([axis], dtype)
    attrs = {"exclusive": g.chooser.choice((0, 1)), "reverse": g.chooser.choice((0, 1))}
    k = v.shape[axis]
    lo, hi = _sum(v, k)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    return g.node("CumSum", [v, axis_value], attrs,
                  [{"lo": lo, "hi": hi, "finite": v.finite, "tol": exact_or(v.dtype, [v], k + 2 if k > 1 else 0)}])


def _softmax_like(op: str, bounds: Callable[[Value, int], tuple[float, float]], needs_exact: bool) -> None:
    @register(op, "reduce", dtypes=("float32",) if needs_exact else FLOATS, needs_exact=needs_exact, min_rank=1)
    def build(g: GraphBuilder, v: Value) -> list[Value]:
        axis = pick_axis(g, v)
        n = v.shape[axis] if g.opset >= 13 else math.prod(v.shape[axis:])  # before 13: flattened from axis
        if n == 1 and op != "Hardmax":
            if "softmax_axis_1" in g.avoid:
                raise Reject("softmax over an axis of size 1 (known bug)")
            g.hazards.add("softmax_axis_1")
        lo, hi = bounds(v, max(n, 1))
        amp = max(1.0, min(v.magnitude, 100.0))  # exp inside: error grows with |x|
        tol = exact_or(v.dtype, [v], 0 if op == "Hardmax" else 64 + n, amp)
        return g.node(op, [v], {"axis": axis}, [{"lo": lo, "hi": hi, "finite": v.finite, "tol": tol}])


_softmax_like("Softmax", lambda v, n: (0.0, 1.0), False)
_softmax_like("LogSoftmax", lambda v, n: (min(v.lo - v.hi - math.log(n), 0.0), 0.0), False)
_softmax_like("Hardmax", lambda v, n: (0.0, 1.0), True)

