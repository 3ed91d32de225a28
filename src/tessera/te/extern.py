"""Extern stages: a call of a C function over whole buffers, among ordinary computes.

    col = te.compute(..., materialize=True)                   # an ordinary stage (im2col, say)
    y = te.extern(shape, [w, col], lambda ins, out: te.call_extern(
            "cblas_sgemm", ..., te.pointer(ins[0]), te.pointer(ins[1]), te.pointer(out), ...))
    z = te.compute(shape, lambda *i: relu(y[i] + b[i[1]]))    # runs in place on y's buffer

`lower` gives every input of an extern stage a buffer (nothing can be
inlined into a C function) and lets the chain of elementwise stages that
alone read an extern's result update it in place, so a bias and an
activation after a library call cost no scratch. An extern may run inside
serial `loops`; its `per_iteration` stages, whose definitions use those
loops' variables, are computed again in every iteration, so their scratch
holds one tile (a block of im2col rows) rather than the whole input.
A `parallel` extern runs the iterations of its loops on all threads; its
per-iteration scratch is then allocated inside the loop, one per thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import dtype as dt
from ..tir import expr as E
from ..tir import stmt as S
from ..tir.buffer import Buffer
from ..tir.functor import substitute_stmt
from .tensor import ComputeOp, IterKind, IterVar, Tensor

if TYPE_CHECKING:
    from .gemm_epilogue import GemmOutput  # (which uses `pointer`)

ExternBody = Callable[[tuple[Buffer, ...], Buffer], S.Stmt]  # (input buffers, output buffer) -> statement


@dataclass(frozen=True, eq=False, slots=True)
class ExternOp:
    """A stage whose value is written by `body`, a statement over whole buffers."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    input_tensors: tuple[Tensor, ...]
    body: ExternBody
    loops: tuple[IterVar, ...] = ()  # serial loops around `body`, outermost first
    per_iteration: tuple[Tensor, ...] = ()  # stages computed afresh in every iteration of `loops`
    parallel: bool = False  # the iterations of `loops` are independent: run them on all threads
    gemm_output: GemmOutput | None = None  # its calls are GEMMs that may run its elementwise tail (gemm_epilogue)

    def inputs(self) -> list[Tensor]:
        return list(self.input_tensors)


def extern(shape: Sequence[int], inputs: Sequence[Tensor], body: ExternBody, name: str = "extern",
           dtype: str = "float32", loops: Sequence[IterVar] = (),
           per_iteration: Sequence[Tensor] = (), parallel: bool = False,
           gemm_output: GemmOutput | None = None) -> Tensor:
    """A tensor of `shape` that `body(input_buffers, output_buffer)` writes.

    `body` sees the buffers of `inputs` in order and may use the variables of
    `loops` (see `axis`); `per_iteration` lists the stages (inputs, or stages
    they read) to compute again inside those loops, before each run of `body`.
    With `parallel`, the iterations (which must write disjoint parts of the
    output) run on all threads, each with its own per-iteration scratch.
    With `gemm_output`, `body` calls GEMM entries and says where they put C,
    so the elementwise tail may run inside the calls (`gemm_epilogue`).
    """
    dt.info(dtype)
    if not all(isinstance(t.op, ComputeOp) for t in per_iteration):
        raise ValueError(f"extern {name}: only compute stages can be computed per iteration")
    return Tensor(ExternOp(name, tuple(int(s) for s in shape), dtype, tuple(inputs), body, tuple(loops),
                           tuple(per_iteration), parallel, gemm_output))


def axis(extent: int, name: str) -> IterVar:
    """A serial loop for `extern(..., loops=...)`; its `.var` indexes inside the loop."""
    return IterVar(E.Var(name, "int32"), int(extent), IterKind.SPATIAL)


def loop_nest(axes: Sequence[IterVar], body: S.Stmt, unroll: Sequence[str] = ()) -> S.Stmt:
    """Loops over `axes` around `body`, outermost first; extent-1 loops become index 0, `unroll`ed ones are marked."""
    for ax in reversed(axes):
        if ax.extent == 1:
            body = substitute_stmt(body, {ax.var: E.IntImm(0)})
        else:
            kind = S.ForKind.UNROLLED if ax.name in unroll else S.ForKind.SERIAL
            body = S.For(ax.var, E.IntImm(ax.extent), body, kind)
    return body


def serial_loops(extents: Sequence[int], body: Callable[..., S.Stmt], names: Sequence[str] = ()) -> S.Stmt:
    """Serial loops over `extents` around `body(*loop_vars)`, e.g. one library call per batch element."""
    names = list(names) or [f"l{k}" for k in range(len(extents))]
    axes = [axis(extent, n) for extent, n in zip(extents, names)]
    return loop_nest(axes, body(*(a.var for a in axes)))


def call_extern(func: str, *args: E.ExprLike) -> S.Stmt:
    """A statement calling the C function `func` (returning void) with `args`."""
    return S.Evaluate(E.call(func, [E.as_expr(a) for a in args], "void"))


def pointer(buf: Buffer, *index: E.ExprLike) -> E.PrimExpr:
    """The address of `buf[index]` (one index per dimension), or of its first element."""
    if index and len(index) != len(buf.shape):
        raise IndexError(f"{buf.name} has {len(buf.shape)} dims, indexed with {len(index)}")
    flat: E.PrimExpr = E.IntImm(0)
    for i, extent in zip(index, buf.shape):
        flat = E.add(E.mul(flat, extent), i)
    return E.BufferPtr(buf, flat)
