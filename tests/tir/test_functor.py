"""map_child_stmts: the one-level statement rebuild that TIR passes share."""

from __future__ import annotations

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer, Scope
from tessera.tir.functor import map_child_stmts

BUF = Buffer("b", (4,), "float32")
I = E.Var("i", "int32")


def _store(value: float) -> S.BufferStore:
    return S.BufferStore(BUF, E.const(value, "float32"), (I,))


def _nest() -> S.Stmt:
    tmp = Buffer("t", (1,), "float32", Scope.LOCAL)
    branch = S.IfThenElse(E.lt(I, 2), _store(1.0), _store(2.0))
    return S.For(I, E.IntImm(4), S.Allocate(tmp, S.SeqStmt((branch, _store(3.0)))), S.ForKind.SERIAL)


def _bump(s: S.Stmt) -> S.Stmt:
    """Every store of 3.0 becomes a store of 4.0; the rest is rebuilt only where it changed."""
    if isinstance(s, S.BufferStore):
        return _store(4.0) if isinstance(s.value, E.FloatImm) and s.value.value == 3.0 else s
    return map_child_stmts(s, _bump)


def test_unchanged_children_keep_every_object():
    nest = _nest()
    assert map_child_stmts(nest, lambda child: child) is nest
    assert _bump(_store(1.0)).value.value == 1.0  # a leaf comes back as it is


def test_a_changed_leaf_rebuilds_only_its_ancestors():
    nest = _nest()
    out = _bump(nest)
    assert isinstance(out, S.For) and out is not nest and out.loop_var is I and out.kind is nest.kind
    alloc, old_alloc = out.body, nest.body
    assert isinstance(alloc, S.Allocate) and alloc.buffer is old_alloc.buffer
    branch, store = alloc.body.stmts
    assert branch is old_alloc.body.stmts[0]  # the untouched sibling is the same object
    assert store.value.value == 4.0
