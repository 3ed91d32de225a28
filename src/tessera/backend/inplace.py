"""Which outputs of a kernel may be written over one of its inputs.

An output may share its input's memory when the kernel reads each element of
the input only to compute the element of the output at the same place, and
before writing it: one store to the output, executed exactly once per
element, whose value reads the input at the very index it stores to, and no
other access to either buffer. Elementwise and injective same-index kernels
(ReLU, add with bias folded in, casts of equal width) pass; transposes,
reductions, padding, extern calls (a pointer escapes) and guarded stores do
not. The executors then let such an output live in its input's buffer when
the input dies at that step.

The same test finds scratch that may live in an output: a fused kernel
that computes a stage into scratch (a convolution before its bias and
ReLU) and then writes the output from it element by element can compute
the stage in the output's memory, when every other access to the scratch
comes in an earlier top-level statement of the kernel.
"""

from __future__ import annotations

from ..tir import expr as E
from ..tir import stmt as S
from ..tir.buffer import Buffer
from ..tir.functor import walk_expr


def _flat_index(buf: Buffer, indices: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
    flat: E.PrimExpr = E.IntImm(0)
    for extent, index in zip(buf.shape, indices):
        flat = E.add(E.mul(flat, E.IntImm(extent)), index)
    return flat


class _Accesses:
    def __init__(self) -> None:
        # per root buffer id: stores (store, trips), loads (load, enclosing store), pointer uses,
        # and the top-level statements of the kernel that touch it
        self.stores: dict[int, list[tuple[S.BufferStore, int | None]]] = {}
        self.loads: dict[int, list[tuple[E.BufferLoad, S.BufferStore | None]]] = {}
        self.escapes: set[int] = set()
        self.top = 0
        self.store_top: dict[int, int] = {}
        self.load_top: dict[int, int] = {}

    def exprs(self, e: E.PrimExpr, store: S.BufferStore | None) -> None:
        for n in walk_expr(e):
            if isinstance(n, E.BufferLoad):
                self.loads.setdefault(id(n.buffer.root), []).append((n, store))
                self.load_top[id(n)] = self.top
            elif isinstance(n, E.BufferPtr):
                self.escapes.add(id(n.buffer.root))

    def stmt(self, s: S.Stmt, trips: int | None) -> None:
        if isinstance(s, S.BufferStore):
            self.stores.setdefault(id(s.buffer.root), []).append((s, trips))
            self.store_top[id(s)] = self.top
            self.exprs(s.value, s)
            for i in s.indices:
                self.exprs(i, s)
        elif isinstance(s, S.For):
            self.exprs(s.extent, None)
            extent = s.extent.value if isinstance(s.extent, E.IntImm) else None
            self.stmt(s.body, None if trips is None or extent is None else trips * extent)
        elif isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.stmt(x, trips)
        elif isinstance(s, S.IfThenElse):
            self.exprs(s.cond, None)
            self.stmt(s.then_case, None)
            if s.else_case is not None:
                self.stmt(s.else_case, None)
        elif isinstance(s, S.LetStmt):
            self.exprs(s.value, None)
            self.stmt(s.body, trips)
        elif isinstance(s, S.Allocate):
            self.stmt(s.body, trips)
        elif isinstance(s, (S.Evaluate, S.Return)):
            self.exprs(s.value, None)


def _accesses(func: S.PrimFunc) -> _Accesses:
    body = func.body
    while isinstance(body, (S.Allocate, S.LetStmt)):
        body = body.body
    acc = _Accesses()
    if body is not func.body:  # wrappers: treat the whole body as one statement
        acc.stmt(func.body, 1)
        return acc
    for k, x in enumerate(body.stmts if isinstance(body, S.SeqStmt) else (body,)):
        acc.top = k
        acc.stmt(x, 1)
    return acc


def _single_store(acc: _Accesses, out: Buffer) -> S.BufferStore | None:
    """The one store writing each element of `out` once, if the output has exactly that and no reads."""
    stores = acc.stores.get(id(out), [])
    if len(stores) != 1 or id(out) in acc.escapes or acc.loads.get(id(out)):
        return None
    store, trips = stores[0]
    return store if trips == out.size else None


def _read_in_place(acc: _Accesses, src: Buffer, store: S.BufferStore) -> bool:
    """Every read of `src` inside `store` is at the element `store` writes."""
    target = _flat_index(store.buffer, store.indices)
    loads = [(ld, s) for ld, s in acc.loads.get(id(src), []) if s is store]
    return bool(loads) and all(_flat_index(ld.buffer, ld.indices) == target for ld, _ in loads)


def scratch_in_outputs(func: S.PrimFunc, scratch: tuple[Buffer, ...]) -> dict[int, int]:
    """Parameter index of a scratch buffer -> parameter index of an output it may live in."""
    acc = _accesses(func)
    index = {id(b): k for k, b in enumerate(func.params)}
    pairs: dict[int, int] = {}
    used: set[int] = set()
    for buf in scratch:
        if id(buf) in acc.escapes:
            continue
        for o_index in range(func.num_inputs, len(func.params) - len(scratch)):
            out = func.params[o_index]
            if o_index in used or out.dtype != buf.dtype or out.size != buf.size:
                continue
            store = _single_store(acc, out)
            if store is None or not _read_in_place(acc, buf, store):
                continue
            last = acc.store_top[id(store)]
            before = [acc.store_top[id(st)] for st, _ in acc.stores.get(id(buf), [])]
            before += [acc.load_top[id(ld)] for ld, st in acc.loads.get(id(buf), []) if st is not store]
            # every other access to the scratch comes in an earlier top-level statement
            if all(t < last for t in before):
                pairs[index[id(buf)]] = o_index
                used.add(o_index)
                break
    return pairs


def inplace_pairs(func: S.PrimFunc) -> dict[int, int]:
    """Parameter index of an output -> parameter index of an input it may overwrite."""
    acc = _accesses(func)
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    for o_index in range(func.num_inputs, len(func.params)):
        out = func.params[o_index]
        store = _single_store(acc, out)
        if store is None:
            continue
        for i_index in range(func.num_inputs):
            inp = func.params[i_index]
            if i_index in taken or inp.dtype != out.dtype or inp.size != out.size or id(inp) in acc.escapes:
                continue
            loads = acc.loads.get(id(inp), [])
            if loads and all(s is store for _, s in loads) and _read_in_place(acc, inp, store):
                pairs[o_index] = i_index
                taken.add(i_index)
                break
    return pairs


def _roots(stmt: S.Stmt) -> set[int]:
    """Ids of the root buffers a statement reads, writes or passes by pointer."""
    found: set[int] = set()
    for x in S.walk_stmts(stmt):
        exprs: tuple = ()
        if isinstance(x, S.BufferStore):
            found.add(id(x.buffer.root))
            exprs = (x.value, *x.indices)
        elif isinstance(x, S.For):
            exprs = (x.extent,)
        elif isinstance(x, S.IfThenElse):
            exprs = (x.cond,)
        elif isinstance(x, (S.LetStmt, S.Evaluate, S.Return)):
            exprs = (x.value,)
        for e in exprs:
            for n in walk_expr(e):
                if isinstance(n, (E.BufferLoad, E.BufferPtr)):
                    found.add(id(n.buffer.root))
    return found


def kernel_spans(func: S.PrimFunc) -> tuple[int, list[tuple[int, int]]]:
    """The kernel's top-level statements, and per parameter the first and last of them touching it.

    Statements run one after the other, so a buffer is alive within its step
    only from its first to its last statement: scratch of an early stage may
    share memory with an output written by a later one.
    """
    body = func.body
    tops = list(body.stmts) if isinstance(body, S.SeqStmt) else [body]
    index = {id(b): k for k, b in enumerate(func.params)}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for t, stmt in enumerate(tops):
        for root in _roots(stmt):
            if root in index:
                first.setdefault(index[root], t)
                last[index[root]] = t
    n = len(tops)
    return n, [(first.get(k, 0), last.get(k, n - 1)) for k in range(len(func.params))]
