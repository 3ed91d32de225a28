"""Operator generators: how to append one random node of an operator type.

Each `OpSpec` names an ONNX operator, the family it belongs to (families
are drawn evenly, so the long tail of elementwise operators does not drown
the rest), and a builder that extends a `GraphBuilder` from a primary input.
A builder raises `Reject` when the input does not suit it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

from .graph import ALL_DTYPES, GraphBuilder, Reject, Value, eps

Build = Callable[[GraphBuilder, Value], list[Value]]

FAMILIES = ("unary", "binary", "reduce", "movement", "index", "nn", "norm")
MAX_AMP = 1e4  # operators that would amplify rounding error more are not applied


@dataclass(frozen=True)
class OpSpec:
    op_type: str
    family: str
    build: Build
    dtypes: tuple[str, ...] = ALL_DTYPES  # dtypes of the primary input it accepts
    min_opset: int = 1
    max_opset: int = 99
    needs_exact: bool = False  # discontinuous (Floor, ArgMax, a cast to int): rounding error would flip results
    specials_ok: bool = False  # gives the same result as any correct implementation for NaN and infinity
    min_rank: int = 0
    max_rank: int = 6

    def accepts(self, g: GraphBuilder, v: Value) -> bool:
        return (v.dtype in self.dtypes and self.min_opset <= g.opset <= self.max_opset
                and self.min_rank <= v.rank <= self.max_rank
                and (v.exact or not self.needs_exact) and (v.finite or self.specials_ok))


class OpRegistry:
    def __init__(self) -> None:
        self._specs: dict[str, OpSpec] = {}

    def add(self, spec: OpSpec) -> OpSpec:
        if spec.family not in FAMILIES:
            raise ValueError(f"unknown family {spec.family!r}; valid: {', '.join(FAMILIES)}")
        key = spec.op_type
        while key in self._specs:  # one op type may have several generators (forms)
            key += "'"
        self._specs[key] = spec
        return spec

    def specs(self, family: str | None = None) -> list[OpSpec]:
        return [s for s in self._specs.values() if family is None or s.family == family]

    def op_types(self) -> set[str]:
        return {s.op_type for s in self._specs.values()}


REGISTRY = OpRegistry()


class SpecOptions(TypedDict, total=False):
    """The optional `OpSpec` fields, as `register` takes them."""

    dtypes: tuple[str, ...]
    min_opset: int
    max_opset: int
    needs_exact: bool
    specials_ok: bool
    min_rank: int
    max_rank: int


def register(op_type: str, family: str, **options: Unpack[SpecOptions]) -> Callable[[Build], Build]:
    def wrap(build: Build) -> Build:
        REGISTRY.add(OpSpec(op_type, family, build, **options))
        return build

    return wrap


# -------------------------------------------------- shared fact arithmetic
def out_tol(dtype: str, inputs: Sequence[Value], ulps: float, amp: float = 1.0) -> float:
    """Relative error bound: inputs' error amplified, plus this op's own."""
    carried = max((v.tol for v in inputs), default=0.0) * amp
    return carried + ulps * eps(dtype) if dtype.startswith("float") else 0.0


def exact_or(dtype: str, inputs: Sequence[Value], ulps: float, amp: float = 1.0) -> float:
    """0 when every input is exact and the op is exact (ulps=0)."""
    if ulps == 0 and all(v.exact for v in inputs):
        return 0.0
    return out_tol(dtype, inputs, ulps, amp)


def near_zero_amp(v: Value) -> float:
    """How much v's error, relative to its magnitude, grows relative to its smallest element
    (a divisor or a logarithm's argument near 0 makes rounding error arbitrarily large)."""
    if v.exact:
        return 1.0
    smallest = v.lo if v.lo > 0 else (-v.hi if v.hi < 0 else 0.0)
    return v.magnitude / smallest if smallest > 0 else math.inf


def corners(f: Callable[[float, float], float], a: Value, b: Value) -> tuple[float, float]:
    """Bounds of f over the box of a's and b's bounds (for monotone pieces)."""
    vals = []
    for x in (a.lo, a.hi):
        for y in (b.lo, b.hi):
            try:
                vals.append(f(x, y))
            except (OverflowError, ZeroDivisionError, ValueError):
                return -math.inf, math.inf
    if any(math.isnan(v) for v in vals):
        return -math.inf, math.inf
    return min(vals), max(vals)


def safe(f: Callable[[float], float], x: float) -> float:
    try:
        return f(x)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan


def pick_axis(g: GraphBuilder, v: Value, negative_ok: bool = True) -> int:
    if v.rank == 0:
        raise Reject("no axis in a 0-d tensor")
    axis = g.chooser.integer(0, v.rank - 1)
    return axis - v.rank if negative_ok and g.chooser.boolean(0.3) else axis


def pick_axes(g: GraphBuilder, v: Value, min_count: int = 1) -> list[int]:
    """A random non-empty subset of axes (some given as negative numbers)."""
    if v.rank < min_count or v.rank == 0:
        raise Reject("not enough axes")
    count = g.chooser.integer(min_count, v.rank)
    axes: list[int] = []
    pool = list(range(v.rank))
    for _ in range(count):
        a = g.chooser.choice(pool)
        pool.remove(a)
        axes.append(a - v.rank if g.chooser.boolean(0.25) else a)
    return axes
