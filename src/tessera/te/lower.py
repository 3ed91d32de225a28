"""Lower tensor expressions to a TIR PrimFunc.

Policy, in the order the decisions are made:

1. Every compute that is not an output, not a reduction and not marked
   `materialize` is inlined into its consumers (injective chains cost no
   memory traffic).
2. A reduction whose only consumer is an output of the same shape that reads
   it element for element (e.g. conv -> bias add -> relu) writes straight
   into that output's buffer; the consumer then runs as an epilogue inside
   the reduction's outer loops, while the data is still in cache.
3. Other materialised stages get a scratch buffer (`Allocate`).
4. The `Check`s of a stage, and of the stages inlined into it, are tested in
   loops of their own just before it runs: where one fails the kernel
   returns the check's status. (A reduction is not fused with an epilogue
   whose checks read it: they would run before it is computed.)
   An epilogue that changes the dtype (int32 accumulator -> requantised
   int8) fuses only with a reduction accumulated in a local scalar or
   register tile: it reads the accumulator there, so no buffer of the
   reduction's dtype exists at all.
5. An extern stage (`te.extern`) reads its inputs from buffers, so none is
   inlined; the chain of elementwise stages that alone read its result (a
   bias add, then an activation) is one materialised stage whose buffer the
   extern writes, updated in place. Where the extern's calls are GEMMs that
   can run that chain on each tile they finish (`gemm_epilogue.py`), they
   do, and the chain is no pass of its own. Its `per_iteration` stages are emitted
   inside its loops, serially, into one tile-sized buffer each; a parallel
   extern's loops run on all threads, each with its own such buffers.

A reduction's loops follow its `loop_order`. When reduce axes are innermost
the value accumulates in a local scalar; when a schedule moves them outward
(so the innermost loop runs along contiguous output elements and gcc can
vectorise it), the output is initialised first and updated in place, or,
for a stage marked `register_tile` whose inner loops cover a small tile,
accumulated in a local array that gcc keeps in registers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .. import dtype as dt
from ..errors import CompileError
from ..tir import expr as E
from ..tir import stmt as S
from ..tir.buffer import Buffer, Scope
from ..tir.clamp_select import single_compare_clamps
from ..tir.functor import map_expr, substitute, substitute_stmt, walk_expr
from ..tir.simplify import simplify_index
from .extern import ExternOp, loop_nest
from .gemm_epilogue import GemmEpilogue, match_epilogue
from .loop_shapes import merge_contiguous_axes, split_innermost
from .parallel import PARALLEL_MIN_WORK, ROW_PARTS, parallel_outer, runs_in_row_parts, stage_work
from .tensor import (Check, Combiner, ComputeOp, IterKind, IterVar, PlaceholderOp, Reduce, Tensor, is_own_index,
                     producer_of)

Stage = ComputeOp | ExternOp

# The largest register tile (see `te.compute(register_tile=True)`) kept in a
# local array; a larger one accumulates in the output buffer as usual.
LOCAL_TILE_ELEMENTS = 256


def lower(
    name: str,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    attrs: Mapping[str, object] | None = None,
) -> S.PrimFunc:
    return _Lowering(name, list(inputs), _distinct_outputs(outputs)).run(attrs)


def _copy(t: Tensor, name: str) -> Tensor:
    from .tensor import compute

    return compute(t.shape, lambda *i: t[i], name=name)


def _distinct_outputs(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Each output needs its own compute stage: copy placeholders and repeats."""
    result: list[Tensor] = []
    seen: set[int] = set()
    for k, t in enumerate(outputs):
        if isinstance(t.op, PlaceholderOp) or id(t.op) in seen:
            t = _copy(t, f"copy_out{k}")
        seen.add(id(t.op))
        result.append(t)
    return result


def _topo_stages(outputs: Sequence[Tensor]) -> list[Stage]:
    """Compute and extern ops reachable from `outputs`, producers before consumers."""
    order: list[Stage] = []
    state: dict[int, int] = {}  # 1 = on stack, 2 = done
    for out in outputs:
        if isinstance(out.op, PlaceholderOp):
            raise CompileError(f"output {out.name} is a placeholder, not a computed stage")
        stack: list[tuple[Stage, bool]] = [(out.op, False)]
        while stack:
            op, expanded = stack.pop()
            if expanded:
                state[id(op)] = 2
                order.append(op)
                continue
            if state.get(id(op)):
                continue
            state[id(op)] = 1
            stack.append((op, True))
            for t in reversed(op.inputs()):
                if isinstance(t.op, (ComputeOp, ExternOp)) and not state.get(id(t.op)):
                    stack.append((t.op, False))
    return order


def _init_value(r: Reduce) -> E.PrimExpr:
    d = r.source.dtype
    table = {
        Combiner.SUM: lambda: E.const(0, d),
        Combiner.PROD: lambda: E.const(1, d),
        Combiner.MAX: lambda: E.const(dt.min_value(d), d),
        Combiner.MIN: lambda: E.const(dt.max_value(d), d),
    }
    return table[r.combiner]()


def _combine(r: Reduce, acc: E.PrimExpr, value: E.PrimExpr) -> E.PrimExpr:
    table = {
        Combiner.SUM: E.add,
        Combiner.PROD: E.mul,
        Combiner.MAX: E.maximum,
        Combiner.MIN: E.minimum,
    }
    return table[r.combiner](acc, value)


class _Lowering:
    def __init__(self, name: str, inputs: list[Tensor], outputs: list[Tensor]) -> None:
        self.name = name
        self.outputs = outputs
        self.stages = _topo_stages(outputs)
        self.buffers: dict[int, Buffer] = {}
        for k, t in enumerate(inputs):
            self.buffers[id(t.op)] = Buffer(f"p{k}", t.shape, t.dtype)
        self.params_in = [self.buffers[id(t.op)] for t in inputs]
        self.params_out: list[Buffer] = []
        output_ops = {id(t.op) for t in outputs}
        for k, t in enumerate(outputs):
            buf = Buffer(f"out{k}" if len(outputs) > 1 else "out", t.shape, t.dtype)
            self.buffers[id(t.op)] = buf
            self.params_out.append(buf)
        self.consumers: dict[int, list[Stage]] = {}
        for op in self.stages:
            for t in op.inputs():
                self.consumers.setdefault(id(t.op), []).append(op)
        externs = [op for op in self.stages if isinstance(op, ExternOp)]
        self.per_iteration = {id(t.op) for op in externs for t in op.per_iteration}
        self.thread_private = {id(t.op) for op in externs if op.parallel for t in op.per_iteration}
        self.in_place: dict[int, ComputeOp] = {}  # extern op id -> the stage whose buffer it writes
        for op in externs:
            tail = self._in_place_tail(op, output_ops)
            if tail is not None:
                self.in_place[id(op)] = tail
        kept = {id(t.op) for op in externs for t in op.inputs()} | {id(t) for t in self.in_place.values()}
        kept |= self.per_iteration
        self.inlined = {
            id(op)
            for op in self.stages
            if isinstance(op, ComputeOp) and id(op) not in output_ops and not isinstance(op.body, Reduce)
            and not op.materialize and id(op) not in kept
        }
        self._expanded: dict[int, E.PrimExpr] = {}
        self._tested: set[int] = set()  # checks already emitted (an inlined op may feed several stages)
        self.epilogue_of: dict[int, ComputeOp] = {}  # reduction op id -> fused output stage
        # reduction op id -> stand-in buffer its dtype-changing epilogue reads (never allocated)
        self.converted: dict[int, Buffer] = {}
        self._plan_epilogues(output_ops)
        self.gemm_epilogues: dict[int, GemmEpilogue] = {}  # extern op id -> its in-place tail as a program

    # ------------------------------------------------------------ expansion
    def expand(self, e: E.PrimExpr) -> E.PrimExpr:
        """Inline inlinable producers; turn other reads into buffer loads."""

        def rewrite(node: E.PrimExpr) -> E.PrimExpr | None:
            if not isinstance(node, E.ProducerLoad):
                return None
            op = producer_of(node).op
            if id(op) in self.inlined and isinstance(op, ComputeOp):  # only computes are inlined
                body = self._expanded_body(op)
                return substitute(body, {a.var: i for a, i in zip(op.axes, node.indices)})
            buf = self.buffers.get(id(op))
            if buf is None:
                if isinstance(op, PlaceholderOp):
                    raise CompileError(f"kernel {self.name}: tensor {op.name} is not a declared input")
                raise CompileError(f"kernel {self.name}: no buffer for stage {op.name}")
            return E.BufferLoad(buf, node.indices, buf.dtype)

        return map_expr(e, rewrite)

    def _expanded_body(self, op: ComputeOp) -> E.PrimExpr:
        if id(op) not in self._expanded:
            self._expanded[id(op)] = self.expand(op.body)
        return self._expanded[id(op)]

    # -------------------------------------------------------------- planning
    def _in_place_tail(self, op: ExternOp, output_ops: set[int]) -> ComputeOp | None:
        """The last of the elementwise stages that alone read `op`'s result, each the previous one
        at its own index (e.g. add, then relu): it takes over `op`'s buffer."""
        if id(op) in output_ops:
            return None  # it writes its own output
        tail: Stage = op
        taken = {id(t) for t in self.in_place.values()}
        while True:
            users = self.consumers.get(id(tail), [])
            if len(users) != 1 or not isinstance(users[0], ComputeOp):
                break
            user = users[0]
            if (isinstance(user.body, Reduce) or user.checks or user.shape != op.shape
                    or user.dtype != op.dtype or id(user) in taken or id(user) in self.per_iteration):
                break
            reads = [n for n in walk_expr(user.body) if isinstance(n, E.ProducerLoad) and producer_of(n).op is tail]
            if not all(is_own_index(n.indices, user.axes) for n in reads):
                break
            tail = user
            if id(user) in output_ops or user.materialize:
                break  # a stage with a buffer of its own ends the chain
        return tail if isinstance(tail, ComputeOp) else None

    @staticmethod
    def _simplified(op: ComputeOp, value: E.PrimExpr) -> E.PrimExpr:
        """Cancel index divisions that the stage's loop extents make exact; clamp to constants
        with one comparison (see tir/clamp_select)."""
        extents = {a.var: a.extent for a in (*op.axes, *op.reduce_axes)}
        return single_compare_clamps(simplify_index(value, extents))

    def _readers(self, op: ComputeOp) -> set[int]:
        """Non-inlined stages reading `op`, looking through inlined stages."""
        found: set[int] = set()
        stack = list(self.consumers.get(id(op), []))
        seen: set[int] = set()
        while stack:
            user = stack.pop()
            if id(user) in seen:
                continue
            seen.add(id(user))
            if id(user) in self.inlined:
                stack.extend(self.consumers.get(id(user), []))
            else:
                found.add(id(user))
        return found

    def _plan_epilogues(self, output_ops: set[int]) -> None:
        by_id = {id(op): op for op in self.stages}
        for op in self.stages:
            if not isinstance(op, ComputeOp) or not isinstance(op.body, Reduce) or id(op) in output_ops:
                continue
            readers = self._readers(op)
            if len(readers) != 1:
                continue
            user = by_id[next(iter(readers))]
            if not isinstance(user, ComputeOp) or id(user) not in output_ops or user.shape != op.shape:
                continue
            if user.dtype != op.dtype and not self._accumulates_locally(op):
                continue
            if isinstance(user.body, Reduce) or id(user) in {id(u) for u in self.epilogue_of.values()}:
                continue
            # Every read of `op` in the expanded user body must be at the
            # user's own index, or writing in place would be wrong. Other
            # materialised stages the user reads get their buffers only in
            # `run`: stand-ins let the probe expand the body now.
            saved = dict(self.buffers)
            marker = Buffer(f"{op.name}_probe", op.shape, op.dtype)
            self.buffers[id(op)] = marker
            for other in self.stages:
                if id(other) not in self.inlined and id(other) not in self.buffers:
                    self.buffers[id(other)] = Buffer(f"{other.name}_probe", other.shape, other.dtype)
            body = self.expand(user.body)
            conds = [self.expand(c.cond) for c in self._carried_checks(user)]
            self.buffers = saved
            self._expanded.clear()
            reads = [n for n in walk_expr(body) if isinstance(n, E.BufferLoad) and n.buffer is marker]
            checked = any(isinstance(n, E.BufferLoad) and n.buffer is marker for c in conds for n in walk_expr(c))
            if reads and not checked and all(is_own_index(n.indices, user.axes) for n in reads):
                self.epilogue_of[id(op)] = user
                self.buffers[id(op)] = self.buffers[id(user)]
                if user.dtype != op.dtype:
                    self.converted[id(op)] = self.buffers[id(op)] = marker

    # -------------------------------------------------------------- emission
    def run(self, attrs: Mapping[str, object] | None) -> S.PrimFunc:
        allocs: list[Buffer] = []
        fused_epilogues = {id(u) for u in self.epilogue_of.values()}
        for op in self.stages:
            if id(op) in self.inlined or id(op) in self.buffers or id(op) in self.in_place:
                continue
            buf = Buffer(f"{op.name}_buf", op.shape, op.dtype)
            self.buffers[id(op)] = buf
            if id(op) not in self.thread_private:  # (allocated inside its extern's parallel loop)
                allocs.append(buf)
        for op_id, tail in self.in_place.items():
            self.buffers[op_id] = self.buffers[id(tail)]
        self._plan_gemm_epilogues()
        fused_tails = {id(self.in_place[op_id]) for op_id in self.gemm_epilogues}
        body_parts: list[S.Stmt] = []
        for op in self.stages:
            if (id(op) in self.inlined or id(op) in fused_epilogues or id(op) in self.per_iteration
                    or id(op) in fused_tails):
                continue
            if isinstance(op, ExternOp):
                body_parts.append(self._emit_extern(op))
                continue
            body_parts.extend(self._checks_before(op))
            body_parts.append(self._emit_stage(op))
        body = S.seq(*body_parts)
        for buf in reversed(allocs):
            body = S.Allocate(buf, body)
        return S.PrimFunc(self.name, tuple(self.params_in + self.params_out), body,
                          len(self.params_in), attrs or {})

    def _plan_gemm_epilogues(self) -> None:
        """The in-place tails that run inside their extern's GEMM calls (gemm_epilogue.py): a tail whose
        checks (its own or its inlined stages') would have to run before the product stays a pass."""
        for op in self.stages:
            tail = self.in_place.get(id(op))
            if not isinstance(op, ExternOp) or op.gemm_output is None or tail is None:
                continue
            if self._carried_checks(tail) or any(a.extent == 0 for a in tail.axes):
                continue
            value = self._simplified(tail, self.expand(tail.body))
            epilogue = match_epilogue(value, self.buffers[id(tail)], tail.axes, op.gemm_output)
            if epilogue is not None:
                self.gemm_epilogues[id(op)] = epilogue

    def _checks_before(self, op: ComputeOp) -> list[S.Stmt]:
        """The checks to test before `op` (and its fused epilogue) runs that no earlier stage tested."""
        epilogue = self.epilogue_of.get(id(op))
        found = []
        for carrier in (op,) if epilogue is None else (op, epilogue):
            for check in self._carried_checks(carrier):
                if id(check) not in self._tested:
                    self._tested.add(id(check))
                    found.append(self._emit_check(check))
        return found

    def _emit_extern(self, op: ExternOp) -> S.Stmt:
        """The extern's body in its loops, after the stages it computes per iteration."""
        staged: list[S.Stmt] = []
        checked = False
        mine = {id(t.op) for t in op.per_iteration}
        for stage in self.stages:
            if id(stage) in mine:  # producers first
                assert isinstance(stage, ComputeOp)
                checks = self._checks_before(stage)
                checked |= bool(checks)
                staged += [*checks, self._emit_stage(stage, parallel=False)]
        ins = tuple(self.buffers[id(t.op)] for t in op.input_tensors)
        epilogue = self.gemm_epilogues.get(id(op))
        if epilogue is not None and op.gemm_output is not None:
            call = op.gemm_output.fused_body(ins, self.buffers[id(op)], epilogue)
        else:
            call = op.body(ins, self.buffers[id(op)])
        body = S.seq(*staged, call)
        if not op.parallel:
            return loop_nest(op.loops, body)
        for t in reversed(op.per_iteration):  # each thread's own scratch, declared in the loop body
            body = S.Allocate(self.buffers[id(t.op)], body)
        # (a failed check returns, which it may not from inside a parallel loop)
        return loop_nest(op.loops, body) if checked else parallel_outer(loop_nest(op.loops, body), PARALLEL_MIN_WORK)

    def _carried_checks(self, op: ComputeOp) -> list[Check]:
        """Checks of `op` and of the inlined stages its expansion pulls in, producers' first."""
        found: list[Check] = []
        seen: set[int] = set()

        def visit(o: ComputeOp) -> None:
            if id(o) in seen:
                return
            seen.add(id(o))
            for t in o.inputs():
                if id(t.op) in self.inlined and isinstance(t.op, ComputeOp):  # only computes are inlined
                    visit(t.op)
            found.extend(o.checks)

        visit(op)
        return found

    def _emit_check(self, check: Check) -> S.Stmt:
        """Serial loops over the check's points; the first that fails returns its status."""
        cond = simplify_index(self.expand(check.cond), {a.var: a.extent for a in check.axes})
        fail = S.IfThenElse(E.logical_not(cond), S.Return(E.IntImm(check.status)))
        return loop_nest(check.axes, fail)

    def _ordered_axes(self, op: ComputeOp) -> list[IterVar]:
        axes = list(op.axes) + list(op.reduce_axes)
        if op.loop_order is None:
            return axes
        by_name = {a.name: a for a in axes}
        return [by_name[n] for n in op.loop_order]

    def _emit_stage(self, op: ComputeOp, parallel: bool = True) -> S.Stmt:
        if any(a.extent == 0 for a in op.axes):
            # a zero-size result: nothing to write, and its index arithmetic may divide by a 0 extent
            return S.seq()
        buf = self.buffers[id(op)]
        index = tuple(a.var for a in op.axes)
        # stages computed per iteration of an extern's loops run on one thread, like the extern (the
        # caller says so); a stage updating its result in place runs after the call, on all threads
        # when it is big (a GEMM's bias and ReLU over 351 K elements, ShuffleNet, ran on one)
        updates_extern = any(op is tail for tail in self.in_place.values())
        work = stage_work(op) if parallel else 0
        if not isinstance(op.body, Reduce):
            value = self._simplified(op, self.expand(op.body))
            axes = self._ordered_axes(op)
            store = S.BufferStore(buf, value, index)
            if updates_extern and op.loop_order is None:
                axes, store = merge_contiguous_axes(axes, store)
            split = split_innermost(axes[-1].var, axes[-1].extent, store) if op.split_bounds and axes else None
            if split is not None:
                return parallel_outer(loop_nest(axes[:-1], split), work)
            return parallel_outer(loop_nest(axes, store), work)
        reduce = op.body
        order = self._ordered_axes(op)
        # a reduction over no axes (a 0-d input) combines its one element with the identity
        first_reduce = next((k for k, a in enumerate(order) if a.kind is IterKind.REDUCE), len(order))
        outer, inner = order[:first_reduce], order[first_reduce:]
        inner_spatial = [a for a in inner if a.kind is IterKind.SPATIAL]
        source = self._simplified(op, self.expand(reduce.source))
        epilogue = self.epilogue_of.get(id(op))
        tail = self._epilogue_store(epilogue, op) if epilogue is not None and id(op) not in self.converted else None
        if not inner_spatial:
            core = self._accumulate_locally(op, reduce, source, inner, buf, index)
        elif reduce.combiner in (Combiner.ARGMAX, Combiner.ARGMIN):
            raise CompileError(f"stage {op.name}: arg-reductions need their reduce axis innermost")
        elif op.register_tile and math.prod(a.extent for a in inner_spatial) <= LOCAL_TILE_ELEMENTS:
            core = self._accumulate_tile(op, reduce, source, inner, inner_spatial, buf, index)
        elif op.row_parts and not any(a.extent > 1 for a in outer) and self._splits_rows(inner, buf, work):
            return loop_nest(outer, self._row_parts(op, reduce, source, inner, buf, index, tail))
        else:
            init = loop_nest(inner_spatial, S.BufferStore(buf, _init_value(reduce), index))
            acc = E.BufferLoad(buf, index, buf.dtype)
            update = loop_nest(inner, S.BufferStore(buf, _combine(reduce, acc, source), index))
            core = S.seq(init, update)
        if tail is not None:
            core = S.seq(core, loop_nest(inner_spatial, tail))
        return parallel_outer(loop_nest(outer, core), work)

    @staticmethod
    def _splits_rows(inner: list[IterVar], buf: Buffer, work: int) -> bool:
        """Whether a reduction whose loops are `inner` (no spatial loop outside them) runs as row parts
        (parallel.py's ROW_PARTS): reduce axes, then its one column axis, big enough for threads."""
        if len(inner) < 2 or inner[-1].kind is not IterKind.SPATIAL:
            return False
        if any(a.kind is not IterKind.REDUCE for a in inner[:-1]):
            return False
        return runs_in_row_parts(inner[0].extent, inner[-1].extent, dt.info(buf.dtype).nbytes, work)

    def _row_parts(self, op: ComputeOp, reduce: Reduce, source: E.PrimExpr, inner: list[IterVar], buf: Buffer,
                   index: tuple[E.Var, ...], tail: S.Stmt | None) -> S.Stmt:
        """The reduction over `inner` (reduce axes, then the column axis) as ROW_PARTS parts of its
        outermost reduce axis on all threads, each into its row of partial results, which are then
        combined column by column in part order: the same sums at any thread count."""
        rows, column = inner[0], inner[-1]
        partial = Buffer(f"{op.name}_parts", (ROW_PARTS, column.extent), buf.dtype, Scope.LOCAL)
        part = E.Var(f"{rows.name}_part", "int32")
        per_part = -(-rows.extent // ROW_PARTS)
        first = E.mul(part, E.IntImm(per_part))
        row = E.Var(rows.name, rows.var.dtype)
        at = (part, column.var)
        mine = E.BufferLoad(partial, at, partial.dtype)
        if len(inner) == 2 and rows.extent % (2 * ROW_PARTS) == 0:
            # two rows per pass over the partial row, as gcc does for the serial loop (it does not in the
            # OpenMP function, where it cannot tell the partial row from the weight): half the loads and stores
            pair = [substitute(source, {rows.var: E.add(first, E.add(E.mul(row, E.IntImm(2)), E.IntImm(k)))})
                    for k in (0, 1)]
            update = loop_nest([column], S.BufferStore(partial, _combine(reduce, _combine(reduce, mine, pair[0]),
                                                                          pair[1]), at))
            rows_loop = S.For(row, E.IntImm(per_part // 2), update)
        else:
            count = E.minimum(E.IntImm(per_part), E.sub(E.IntImm(rows.extent), first))
            update = loop_nest(inner[1:], S.BufferStore(partial, _combine(reduce, mine, source), at))
            rows_loop = S.For(row, count, substitute_stmt(update, {rows.var: E.add(first, row)}))
        parts = S.For(part, E.IntImm(ROW_PARTS), S.seq(
            loop_nest([column], S.BufferStore(partial, _init_value(reduce), at)), rows_loop), S.ForKind.PARALLEL)
        acc = E.BufferLoad(buf, index, buf.dtype)
        combine = S.For(part, E.IntImm(ROW_PARTS), S.BufferStore(buf, _combine(reduce, acc, mine), index))
        per_column = S.seq(S.BufferStore(buf, _init_value(reduce), index), combine, *([tail] if tail else []))
        return S.Allocate(partial, S.seq(parts, loop_nest([column], per_column)))

    def _accumulate_locally(
        self, op: ComputeOp, reduce: Reduce, source: E.PrimExpr,
        inner: list[IterVar], buf: Buffer, index: tuple[E.Var, ...],
    ) -> S.Stmt:
        zero = (E.IntImm(0),)
        if reduce.combiner in (Combiner.ARGMAX, Combiner.ARGMIN):
            return self._arg_reduce(op, reduce, source, inner, buf, index)
        acc_buf = Buffer(f"{op.name}_acc", (1,), reduce.source.dtype, Scope.LOCAL)
        acc = E.BufferLoad(acc_buf, zero, acc_buf.dtype)
        lanes = op.partial_sums
        if lanes and reduce.combiner is Combiner.SUM and inner and inner[-1].extent >= 2 * lanes:
            update = self._partial_sums(op, source, inner, acc_buf, lanes)
        else:
            update = loop_nest(inner, S.BufferStore(acc_buf, _combine(reduce, acc, source), zero))
        body = S.seq(
            S.BufferStore(acc_buf, _init_value(reduce), zero),
            update,
            self._store_result(op, acc, buf, index),
        )
        return S.Allocate(acc_buf, body)

    @staticmethod
    def _partial_sums(op: ComputeOp, source: E.PrimExpr, inner: list[IterVar], acc_buf: Buffer,
                      lanes: int) -> S.Stmt:
        """`acc += source` over the reduce axes `inner`, the innermost split into `lanes` partial sums
        (see `te.compute`'s `partial_sums`): whole vectors first, then the rest into `acc`."""
        zero = (E.IntImm(0),)
        r = inner[-1]
        part = Buffer(f"{op.name}_lanes", (lanes,), acc_buf.dtype, Scope.LOCAL)
        step, lane, rest = (E.Var(f"{r.name}_{n}", "int32") for n in ("step", "lane", "rest"))
        whole = r.extent // lanes
        at_lane = (lane,)
        add_lane = S.BufferStore(part, E.add(E.BufferLoad(part, at_lane, part.dtype),
                                             substitute(source, {r.var: E.add(E.mul(step, lanes), lane)})), at_lane)
        acc = E.BufferLoad(acc_buf, zero, acc_buf.dtype)
        vectors = S.For(step, E.IntImm(whole), S.For(lane, E.IntImm(lanes), add_lane, S.ForKind.SERIAL))
        tail = (S.For(rest, E.IntImm(r.extent - whole * lanes),
                      S.BufferStore(acc_buf, E.add(acc, substitute(source, {r.var: E.add(rest, whole * lanes)})),
                                    zero), S.ForKind.SERIAL)
                if r.extent % lanes else S.seq())
        zero_lane = S.For(lane, E.IntImm(lanes), S.BufferStore(part, E.const(0, part.dtype), at_lane))
        merge = S.For(lane, E.IntImm(lanes), S.BufferStore(acc_buf, E.add(acc, E.BufferLoad(part, at_lane, part.dtype)),
                                                          zero))
        return S.Allocate(part, S.seq(zero_lane, loop_nest(inner[:-1], S.seq(vectors, tail)), merge))

    def _accumulate_tile(
        self, op: ComputeOp, reduce: Reduce, source: E.PrimExpr, inner: list[IterVar],
        inner_spatial: list[IterVar], buf: Buffer, index: tuple[E.Var, ...],
    ) -> S.Stmt:
        """A small tile of outputs accumulated in a local array: once gcc
        unrolls the tile loops the accumulators live in registers (a
        register-blocked micro-kernel), and the output is written once."""
        tile = Buffer(f"{op.name}_tile", tuple(a.extent for a in inner_spatial), reduce.source.dtype, Scope.LOCAL)
        at = tuple(a.var for a in inner_spatial)
        acc = E.BufferLoad(tile, at, tile.dtype)
        return S.Allocate(tile, S.seq(
            loop_nest(inner_spatial, S.BufferStore(tile, _init_value(reduce), at)),
            loop_nest(inner, S.BufferStore(tile, _combine(reduce, acc, source), at), op.unroll),
            loop_nest(inner_spatial, self._store_result(op, acc, buf, index)),
        ))

    def _arg_reduce(
        self, op: ComputeOp, reduce: Reduce, source: E.PrimExpr,
        inner: list[IterVar], buf: Buffer, index: tuple[E.Var, ...],
    ) -> S.Stmt:
        zero = (E.IntImm(0),)
        d = reduce.source.dtype
        best_buf = Buffer(f"{op.name}_best", (1,), d, Scope.LOCAL)
        pos_buf = Buffer(f"{op.name}_pos", (1,), "int64", Scope.LOCAL)
        best = E.BufferLoad(best_buf, zero, d)
        pos = E.BufferLoad(pos_buf, zero, "int64")
        k = reduce.axes[0].var
        is_max = reduce.combiner is Combiner.ARGMAX
        if reduce.select_last:
            better = E.ge(source, best) if is_max else E.le(source, best)
        else:
            better = E.gt(source, best) if is_max else E.lt(source, best)
        update = S.IfThenElse(
            better,
            S.seq(S.BufferStore(best_buf, source, zero), S.BufferStore(pos_buf, E.cast(k, "int64"), zero)),
        )
        body = S.seq(
            S.BufferStore(pos_buf, E.const(0, "int64"), zero),
            S.BufferStore(best_buf, source_at_zero(source, k), zero),
            loop_nest(inner, update),
            S.BufferStore(buf, E.cast(pos, buf.dtype), index),
        )
        return S.Allocate(best_buf, S.Allocate(pos_buf, body))

    def _accumulates_locally(self, op: ComputeOp) -> bool:
        """True when `_emit_stage` accumulates `op` in a local scalar or register tile."""
        assert isinstance(op.body, Reduce)
        if op.body.combiner in (Combiner.ARGMAX, Combiner.ARGMIN):
            return False
        order = self._ordered_axes(op)
        first_reduce = next((k for k, a in enumerate(order) if a.kind is IterKind.REDUCE), len(order))
        inner_spatial = [a.extent for a in order[first_reduce:] if a.kind is IterKind.SPATIAL]
        return not inner_spatial or (op.register_tile and math.prod(inner_spatial) <= LOCAL_TILE_ELEMENTS)

    def _store_result(self, op: ComputeOp, acc: E.PrimExpr, buf: Buffer, index: tuple[E.Var, ...]) -> S.Stmt:
        """The store of a finished accumulator: into `buf`, or through a dtype-changing epilogue."""
        marker = self.converted.get(id(op))
        if marker is None:
            return S.BufferStore(buf, E.cast(acc, buf.dtype), index)
        user = self.epilogue_of[id(op)]
        mapping = {u.var: p.var for u, p in zip(user.axes, op.axes)}
        value = self._simplified(op, substitute(self.expand(user.body), mapping))
        value = map_expr(value, lambda n: acc if isinstance(n, E.BufferLoad) and n.buffer is marker else None)
        return S.BufferStore(self.buffers[id(user)], value, index)

    def _epilogue_store(self, user: ComputeOp, producer: ComputeOp) -> S.BufferStore:
        """The output stage's store of one element, on the producer's loop variables."""
        mapping = {u.var: p.var for u, p in zip(user.axes, producer.axes)}
        value = self._simplified(producer, substitute(self.expand(user.body), mapping))
        index = tuple(a.var for a in producer.axes)
        return S.BufferStore(self.buffers[id(user)], value, index)


def source_at_zero(source: E.PrimExpr, k: E.Var) -> E.PrimExpr:
    return substitute(source, {k: E.IntImm(0)})
