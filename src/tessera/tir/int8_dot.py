"""Int8 dot products as one intrinsic: a loop `acc += (int32)a[i + k] * (int32)b[j + k]` becomes
`acc = DOT_INT8(&a[i], &b[j], n, acc)`.

The innermost loop of an int8 convolution or matrix product multiplies two
contiguous int8 runs into an int32 accumulator held in a scalar. As one
`Intrinsic.DOT_INT8` call, the C code generator writes it as `ts_dot_int8`,
which uses a Cortex-M core's DSP (SMLAD) or MVE (Helium) instructions where
it has them, and a plain loop elsewhere.

The C code generator runs this pass on each kernel just before writing it,
after `widen_indices` and after memory planning: the planner's in-place
analysis reads plain loads, not pointers. A loop qualifies when

* its body is one store into a scalar (a local buffer of one element),
  `acc = acc + (int32)a[...] * (int32)b[...]`, all int32;
* `a` and `b` are int8 buffers other than scalars, each read at a flat
  offset that grows by exactly 1 per iteration (contiguous runs);
* its loop variable is an int32 (the helper counts its run in an int32).
"""

from __future__ import annotations

from .. import dtype as dt
from . import expr as E
from . import stmt as S
from .buffer import Scope
from .functor import map_child_stmts, substitute, walk_expr
from .layout import flat_index


def use_int8_dot(func: S.PrimFunc) -> S.PrimFunc:
    """`func` with every qualifying int8 dot-product loop replaced by a DOT_INT8 call (itself if none)."""
    scalars = {id(s.buffer) for s in S.walk_stmts(func.body)
               if isinstance(s, S.Allocate) and s.buffer.scope is Scope.LOCAL and s.buffer.size == 1}
    body = _rewrite(func.body, scalars)
    if body is func.body:
        return func
    return S.PrimFunc(func.name, func.params, body, func.num_inputs, func.attrs)


def _rewrite(s: S.Stmt, scalars: set[int]) -> S.Stmt:
    """`s` with dot loops replaced; unchanged statements stay the same objects."""
    if isinstance(s, S.For):
        dot = _dot_store(s, scalars)
        if dot is not None:
            return dot
    return map_child_stmts(s, lambda child: _rewrite(child, scalars))


def _dot_store(loop: S.For, scalars: set[int]) -> S.BufferStore | None:
    """The DOT_INT8 store replacing `loop`, or None when it is not an int8 dot product."""
    store = loop.body
    if not isinstance(store, S.BufferStore) or id(store.buffer.root) not in scalars:
        return None
    if loop.loop_var.dtype != "int32":
        return None
    v = store.value
    if not (isinstance(v, E.BinaryOp) and v.op is E.BinOp.ADD and v.dtype == "int32"
            and isinstance(v.a, E.BufferLoad) and v.a.buffer is store.buffer
            and isinstance(v.b, E.BinaryOp) and v.b.op is E.BinOp.MUL):
        return None
    runs: list[E.PrimExpr] = []
    for operand in (v.b.a, v.b.b):
        if not (isinstance(operand, E.Cast) and isinstance(operand.value, E.BufferLoad)
                and operand.value.dtype == "int8" and id(operand.value.buffer.root) not in scalars):
            return None
        flat = flat_index(operand.value.buffer, operand.value.indices)
        if _linear_coefficient(flat, loop.loop_var) != 1:
            return None
        runs.append(E.BufferPtr(operand.value.buffer, substitute(flat, {loop.loop_var: E.IntImm(0)})))
    acc = E.BufferLoad(store.buffer, store.indices, v.a.dtype)
    return S.BufferStore(store.buffer, E.Call(E.Intrinsic.DOT_INT8, (runs[0], runs[1], loop.extent, acc), "int32"),
                         store.indices)


def _linear_coefficient(e: E.PrimExpr, var: E.Var) -> int | None:
    """c when `e` is `c * var + (terms without var)`, None when it is not affine in `var`."""
    if e is var:
        return 1
    if not any(n is var for n in walk_expr(e)):
        return 0
    if isinstance(e, E.Cast) and not dt.is_float(e.dtype):
        return _linear_coefficient(e.value, var)
    if isinstance(e, E.BinaryOp) and e.op in (E.BinOp.ADD, E.BinOp.SUB):
        a, b = _linear_coefficient(e.a, var), _linear_coefficient(e.b, var)
        if a is None or b is None:
            return None
        return a + b if e.op is E.BinOp.ADD else a - b
    if isinstance(e, E.BinaryOp) and e.op is E.BinOp.MUL:
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, E.IntImm):
                c = _linear_coefficient(x, var)
                return None if c is None else c * y.value
    return None
