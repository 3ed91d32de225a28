"""Random graphs of 1-6 nodes: a chain from a first input, with side operands.

Each step applies a random operator (family first, then operator) to the
latest value, or now and then to an earlier one, so graphs are chains with
branches and reuse. The last value is an output, and so, at random, are a
few intermediate ones (values that are both consumed and returned test the
memory planner).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from . import ops_binary, ops_index, ops_movement, ops_nn, ops_norm, ops_reduce, ops_unary  # noqa: F401  (register)
from .graph import LARGE_ELEMENTS, MAX_ELEMENTS, Chooser, GraphBuilder, Reject, Value
from .spec import FAMILIES, REGISTRY

# Known tessera bugs, fixed elsewhere; the generator steers clear of them by default so that
# other bugs surface. Re-enable one with `generate_case(avoid=...)` or `scripts/fuzz.py --allow NAME`.
KNOWN_BUGS: dict[str, str] = {
    "softmax_axis_1": "Softmax/LogSoftmax over an axis of size 1 ('no buffer for stage softmax_exp')",
    "scalar_initializer": "0-d initializers import as shape (1,)",
    "gather_out_of_range": "out-of-range Gather indices clamp (onnxruntime rejects them)",
    "int_div_zero": "integer division by zero gives 0 (onnxruntime raises SIGFPE)",
    "output_is_input": "a graph input returned as an output: the AOT executor declares its C name twice",
}
DEFAULT_AVOID = frozenset(KNOWN_BUGS)

OPSETS = (12, 13, 17, 18, 20)
FIRST_DTYPES = ("float32",) * 6 + ("float64", "int32", "int64", "int8", "uint8", "int16", "uint16",
                                    "uint32", "uint64", "bool")
MAX_NODES = 6
LARGE_SHARE = 0.06  # cases with up to LARGE_ELEMENTS elements
AOT_SHARE = 0.15  # cases built with the AOT executor (and run as a host program)


@dataclass(frozen=True)
class Tolerance:
    """How far an output may be from the reference: 0 is exact.

    |actual - expected| <= rel * (|expected| + scale), where scale is the
    larger of the output's largest magnitude and `bound` (the generator's
    bound on its values, capped): after cancellation the rounding error is
    that of the operands, not of the small result.
    """

    rel: float = 0.0
    bound: float = 0.0


@dataclass
class Case:
    """One generated graph with its input data and per-output tolerances."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    tolerances: dict[str, Tolerance]  # by output name
    ops: list[str] = field(default_factory=list)
    hazards: set[str] = field(default_factory=set)  # known bugs (not avoided) the graph may hit
    executor: str = "graph"  # or "aot": standalone C, run as a host program


def random_shape(c: Chooser, large: bool = False) -> tuple[int, ...]:
    if large:
        dims = [c.choice((1, 3, 8, 16, 17, 32, 64, 128)) for _ in range(c.integer(1, 4))]
        while math.prod(dims) > LARGE_ELEMENTS:
            dims[dims.index(max(dims))] //= 2
        return tuple(dims)
    rank = c.choice((0, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4))
    dims = [c.choice((1, 1, 2, 3, 4, 5)) for _ in range(rank)]
    if rank and c.boolean(0.03):
        dims[c.integer(0, rank - 1)] = 0
    return tuple(dims)


def _step(g: GraphBuilder, primary: Value, families: Sequence[str]) -> list[Value]:
    family = g.chooser.choice(families)
    specs = [s for s in REGISTRY.specs(family) if s.accepts(g, primary)]
    spec = g.chooser.choice(specs)
    return spec.build(g, primary)


def generate_case(c: Chooser, avoid: frozenset[str] = DEFAULT_AVOID, families: Sequence[str] = FAMILIES,
                  max_nodes: int = MAX_NODES, first_dtypes: Sequence[str] = FIRST_DTYPES) -> Case:
    """A random valid graph (as far as the generator knows; the reference decides)."""
    executor = "aot" if c.boolean(AOT_SHARE) else "graph"
    large = c.boolean(LARGE_SHARE)
    g = GraphBuilder(c, c.choice(OPSETS), avoid, LARGE_ELEMENTS if large else MAX_ELEMENTS)
    dtype = c.choice(first_dtypes)
    shape = random_shape(c, large)
    first = g.constant(g.random_data(dtype, shape)) if c.boolean(0.05) and shape else g.input(
        g.random_data(dtype, shape))
    target = c.integer(1, max_nodes)
    current = first
    for _ in range(8 * max_nodes):
        if len(g.nodes) >= target:
            break
        produced = [v for v in g.values if v is not first]
        primary = current if not produced or c.boolean(0.8) else c.choice(g.values)
        try:
            current = c.choice(_step(g, primary, families))
        except Reject:
            continue
    if not g.nodes:
        raise Reject("no operator applied")
    outputs = _pick_outputs(g, current)
    model = g.model(outputs)
    return Case(model, {f.value.name: f.data for f in g.feeds}, {v.name: _tolerance(v) for v in outputs},
                list(g.op_tags), set(g.hazards), executor)


def _pick_outputs(g: GraphBuilder, last: Value) -> list[Value]:
    """`last` (or, if it is a graph input, the last computed value) and a few computed ones."""
    inputs = {f.value.name for f in g.feeds} | {t.name for t in g.initializers}
    produced = [v for v in g.values if v.name not in inputs]
    if last.name in inputs:
        if "output_is_input" not in g.avoid:
            g.hazards.add("output_is_input")
        elif produced:
            last = produced[-1]
        else:
            raise Reject("only graph inputs to return")
    extra = [v for v in produced if v.name != last.name and g.chooser.boolean(0.2)][:2]
    return [last, *extra]


def _tolerance(v: Value) -> Tolerance:
    if v.dtype not in ("float32", "float64") or v.exact:
        return Tolerance()
    return Tolerance(v.tol, v.magnitude if math.isfinite(v.magnitude) else 0.0)


def case_summary(case: Case) -> str:
    shapes = ", ".join(f"{n}:{a.dtype}{list(a.shape)}" for n, a in case.feeds.items())
    opset = case.model.opset_import[0].version
    return f"opset {opset}, {case.executor} executor; ops {' -> '.join(case.ops)}; inputs {shapes or '-'}"


