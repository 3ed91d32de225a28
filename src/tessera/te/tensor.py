"""Tensors defined by compute rules, in the style of TVM's TE.

A `Tensor` is produced by an operation: a `PlaceholderOp` (a kernel input) or
a `ComputeOp` (a value per output index, possibly a reduction). Compute ops
also carry scheduling hints that `lower` honours: the loop order and whether
a non-reduction stage is materialised in a buffer instead of inlined; and
`Check`s, conditions on their operands (indices in range, divisors not zero)
that the kernel tests before computing, returning a status where one fails.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import dtype as dt
from ..tir import expr as E

if TYPE_CHECKING:
    from .extern import ExternOp

_ids = itertools.count()


class IterKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


@dataclass(frozen=True, eq=False, slots=True)
class IterVar:
    var: E.Var
    extent: int
    kind: IterKind

    @property
    def name(self) -> str:
        return self.var.name


def is_own_index(indices: Sequence[E.PrimExpr], axes: Sequence[IterVar]) -> bool:
    """True when `indices` address element (axes...) itself (extent-1 axes may read 0)."""
    return len(indices) == len(axes) and all(
        i is a.var or (a.extent == 1 and E.is_const(i, 0)) for i, a in zip(indices, axes))


class Combiner(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"  # yields the position along the single reduce axis
    ARGMIN = "argmin"


@dataclass(frozen=True, slots=True)
class Reduce(E.PrimExpr):
    """A reduction; only allowed as the whole body of a compute."""

    combiner: Combiner
    source: E.PrimExpr
    axes: tuple[IterVar, ...]
    dtype: str
    select_last: bool = False  # arg-reductions: ties go to the last index


@dataclass(frozen=True, eq=False, slots=True)
class Check:
    """A condition every point of `axes` must meet, or the kernel returns `status`.

    `lower` tests it before the first stage that computes (or inlines) the op
    carrying it, once per point: per index or divisor, not per output element.
    """

    axes: tuple[IterVar, ...]
    cond: E.PrimExpr  # bool; may read tensors
    status: int  # a tessera.crt.status.Status


@dataclass(frozen=True, eq=False, slots=True)
class PlaceholderOp:
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, eq=False, slots=True)
class ComputeOp:
    name: str
    axes: tuple[IterVar, ...]
    body: E.PrimExpr
    loop_order: tuple[str, ...] | None = None  # axis names, outermost first
    materialize: bool = False  # keep in a buffer even when it could be inlined
    register_tile: bool = False  # accumulate the spatial loops inside the reduction in a local array
    unroll: tuple[str, ...] = ()  # axis names whose loops the C compiler should unroll fully
    checks: tuple[Check, ...] = ()  # conditions on the operands, tested before computing
    split_bounds: bool = False  # split the innermost loop where a guarded select's bounds tests change
    partial_sums: int = 0  # a sum's innermost reduce loop keeps this many partial sums (vector lanes)
    row_parts: bool = False  # with no spatial loop outside the reduction: its rows in parts on all threads

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.extent for a in self.axes)

    @property
    def dtype(self) -> str:
        return self.body.dtype

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    def inputs(self) -> list["Tensor"]:
        """Tensors this op reads, in first-use order, without repeats."""
        from ..tir.functor import walk_expr

        seen: dict[int, Tensor] = {}
        roots = [self.body.source] if isinstance(self.body, Reduce) else [self.body]
        roots += [c.cond for c in self.checks]
        for root in roots:
            for node in walk_expr(root):
                if isinstance(node, E.ProducerLoad) and id(node.producer) not in seen:
                    seen[id(node.producer)] = producer_of(node)
        return list(seen.values())


@dataclass(frozen=True, eq=False, slots=True)
class Tensor:
    op: "PlaceholderOp | ComputeOp | ExternOp"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    def __getitem__(self, indices: object) -> E.PrimExpr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise IndexError(f"{self.name} has {self.ndim} dims, indexed with {len(indices)}")
        return E.ProducerLoad(self, tuple(E.as_expr(i) for i in indices), self.dtype)

    def __call__(self, *indices: E.ExprLike) -> E.PrimExpr:
        return self[tuple(indices)]

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


def placeholder(shape: Sequence[int], dtype: str, name: str = "input") -> Tensor:
    dt.info(dtype)
    return Tensor(PlaceholderOp(name, tuple(int(s) for s in shape), dtype))


def producer_of(load: E.ProducerLoad) -> Tensor:
    """The tensor `load` reads (TIR types it `object`: TIR may not import TE)."""
    if not isinstance(load.producer, Tensor):
        raise TypeError(f"a ProducerLoad reads {type(load.producer).__name__}, expected a te.Tensor")
    return load.producer


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., E.ExprLike],
    name: str = "compute",
    dtype: str | None = None,
    axis_names: Sequence[str] | None = None,
    loop_order: Sequence[str] | None = None,
    materialize: bool = False,
    register_tile: bool = False,
    unroll: Sequence[str] = (),
    checks: Sequence[Check] = (),
    split_bounds: bool = False,
    partial_sums: int = 0,
    row_parts: bool = False,
) -> Tensor:
    """A tensor whose element at index `i` is `fcompute(*i)`.

    `axis_names` names the spatial loops so `loop_order` can mention them
    next to the reduce axes' names. `register_tile`: the spatial loops that
    `loop_order` puts inside the reduce axes form a small tile accumulated in
    a local array (registers) rather than in the output buffer. `unroll`
    names short loops (e.g. kernel taps) to unroll fully. `checks` (see
    `check`) guard the operands. `split_bounds`: a value that is a guarded
    select testing bounds on the innermost axis (padding) is stored by
    loops split where the tests change, without tests (see loop_shapes.py).
    `partial_sums`: a sum whose spatial loops all run outside its reduction
    adds its innermost reduce axis into this many partial sums, lane by
    lane, and adds them up at the end. gcc may not reassociate float
    additions, so a single accumulator is a chain of dependent adds, one
    element per add's latency; the partial sums are a vector's lanes. The
    order of the additions changes, so the rounding does. `row_parts`: a
    reduction with no spatial loop outside it and its one spatial loop
    innermost (a dense layer on one row) runs its outermost reduce loop in
    parts on all threads, each into a row of partial results on the stack,
    then combines them (te/parallel.py's ROW_PARTS); for targets with
    threads only. The rounding changes likewise, not with the thread count.
    """
    names = list(axis_names) if axis_names is not None else [f"i{k}" for k in range(len(shape))]
    if len(names) != len(shape):
        raise ValueError(f"{len(names)} axis names for a {len(shape)}-d compute")
    axes = tuple(
        IterVar(E.Var(n, "int32"), int(extent), IterKind.SPATIAL) for n, extent in zip(names, shape)
    )
    body = E.as_expr(fcompute(*(a.var for a in axes)))
    if dtype is not None and body.dtype != dtype:
        body = E.cast(body, dtype)
    order = tuple(loop_order) if loop_order is not None else None
    if order is not None:
        known = {a.name for a in axes} | {
            a.name for a in (body.axes if isinstance(body, Reduce) else ())
        }
        if set(order) != known or len(order) != len(known):
            raise ValueError(f"loop_order {order} must list exactly the axes {sorted(known)}")
    return Tensor(ComputeOp(name, axes, body, order, materialize, register_tile, tuple(unroll), tuple(checks),
                            split_bounds, partial_sums, row_parts))


def check(shape: Sequence[int], fcond: Callable[..., E.ExprLike], status: int, name: str = "c") -> Check:
    """A `Check` that `fcond(*i)` holds at every index `i` of `shape`."""
    axes = tuple(IterVar(E.Var(f"{name}{k}", "int32"), int(extent), IterKind.SPATIAL)
                 for k, extent in enumerate(shape))
    return Check(axes, E.as_expr(fcond(*(a.var for a in axes))), int(status))


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    return IterVar(E.Var(name, "int32"), int(extent), IterKind.REDUCE)


def _axes(axis: IterVar | Sequence[IterVar]) -> tuple[IterVar, ...]:
    return (axis,) if isinstance(axis, IterVar) else tuple(axis)


def sum(source: E.PrimExpr, axis: IterVar | Sequence[IterVar]) -> Reduce:  # noqa: A001
    return Reduce(Combiner.SUM, source, _axes(axis), source.dtype)


def prod(source: E.PrimExpr, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return Reduce(Combiner.PROD, source, _axes(axis), source.dtype)


def max_reduce(source: E.PrimExpr, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return Reduce(Combiner.MAX, source, _axes(axis), source.dtype)


def min_reduce(source: E.PrimExpr, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return Reduce(Combiner.MIN, source, _axes(axis), source.dtype)


def argmax(source: E.PrimExpr, axis: IterVar, select_last: bool = False) -> Reduce:
    return Reduce(Combiner.ARGMAX, source, (axis,), "int64", select_last)


def argmin(source: E.PrimExpr, axis: IterVar, select_last: bool = False) -> Reduce:
    return Reduce(Combiner.ARGMIN, source, (axis,), "int64", select_last)

