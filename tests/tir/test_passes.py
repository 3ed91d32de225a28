"""TIR passes, checked with before/after IR: the expected output is built by hand and
compared structurally (names aside), as the Relay passes are tested."""

from __future__ import annotations

from tessera import te
from tessera.backend.lift_workspace import WORKSPACES_ATTR, lift_workspaces
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer, Scope
from tessera.tir.index_width import widen_indices
from tessera.tir.scratch_slices import slice_int8_scratch
from tessera.tir.simplify import simplify_index
from tessera.tir.structural import assert_structural_equal
from tessera.tir.verify import verify_primfunc

BIG = (65536, 32769)  # 2**31 + 65536 elements: a flat offset into it passes INT32_MAX


def load(buf: Buffer, *indices: E.PrimExpr) -> E.PrimExpr:
    return E.BufferLoad(buf, tuple(indices), buf.dtype)


def wide(e: E.PrimExpr) -> E.PrimExpr:
    return E.cast(e, "int64")


# ---------------------------------------------------------------- simplify_index

def test_simplify_index_cancels_a_flatten_unflatten_pair():
    i, j = E.Var("i"), E.Var("j")
    flat = E.add(E.mul(i, 8), j)
    extents = {i: 4, j: 8}
    assert_structural_equal(simplify_index(E.floordiv(flat, 8), extents), i)
    assert_structural_equal(simplify_index(E.floormod(flat, 8), extents), j)
    # nested divisions merge first: (i*8 + j) // 2 // 4 == (i*8 + j) // 8 == i
    assert_structural_equal(simplify_index(E.floordiv(E.floordiv(flat, 2), 4), extents), i)


def test_simplify_index_keeps_what_ranges_do_not_prove():
    i, j = E.Var("i"), E.Var("j")
    flat = E.add(E.mul(i, 8), j)
    before = E.floordiv(flat, 8)
    # j may reach 9: j // 8 is not always 0
    assert_structural_equal(simplify_index(before, {i: 4, j: 10}), before)
    # the remainder part of (i*8 + j + 3) % 8 is j + 3, which may pass 8
    shifted = E.floormod(E.add(flat, 3), 8)
    assert_structural_equal(simplify_index(shifted, {i: 4, j: 8}), shifted)
    assert_structural_equal(simplify_index(shifted, {i: 4, j: 5}), E.add(j, 3))


# ---------------------------------------------------------------- WidenIndices

def _shifted(value_of) -> S.PrimFunc:
    a, out, i = Buffer("a", (4,), "int32"), Buffer("out", (4,), "int32"), E.Var("i")
    return S.PrimFunc("f", (a, out), S.For(i, E.IntImm(4), S.BufferStore(out, value_of(load(a, i), i), (i,))), 1)


def test_widen_indices_leaves_small_kernels_alone():
    func = _shifted(lambda x, i: E.add(x, 7))  # data arithmetic keeps C's int32 semantics
    assert widen_indices(func) is func


def test_widen_indices_computes_a_position_plus_data_exactly():
    # a[i] + i: the position is used as a value, and data of any int32 value may push it past int32
    after = widen_indices(_shifted(lambda x, i: E.add(x, i)))
    assert_structural_equal(after, _shifted(lambda x, i: E.cast(E.add(wide(x), wide(i)), "int32")))
    verify_primfunc(after)


def test_widen_indices_moves_a_flat_offset_past_int32_to_int64():
    def kernel(index_of) -> S.PrimFunc:
        src, out = Buffer("src", BIG, "bool"), Buffer("out", (BIG[0] * BIG[1],), "bool")
        i, j = E.Var("i"), E.Var("j")
        store = S.BufferStore(out, load(src, i, j), (index_of(i, j),))
        return S.PrimFunc("f", (src, out), S.For(i, E.IntImm(BIG[0]), S.For(j, E.IntImm(BIG[1]), store)), 1)

    before = kernel(lambda i, j: E.add(E.mul(i, BIG[1]), j))
    expected = kernel(lambda i, j: E.add(E.mul(wide(i), E.IntImm(BIG[1], "int64")), wide(j)))
    after = widen_indices(before)
    assert_structural_equal(after, expected)
    verify_primfunc(after)


def test_widen_indices_gives_a_loop_past_int32_an_int64_counter():
    n = 2**31 + 1

    def kernel(dtype: str) -> S.PrimFunc:
        src, out = Buffer("src", (n,), "bool"), Buffer("out", (n,), "bool")
        i = E.Var("i", dtype)
        body = S.BufferStore(out, E.logical_not(load(src, i)), (i,))
        return S.PrimFunc("f", (src, out), S.For(i, E.IntImm(n, dtype), body), 1)

    after = widen_indices(kernel("int32"))
    assert_structural_equal(after, kernel("int64"))
    verify_primfunc(after)


# ---------------------------------------------------------------- LiftWorkspaces

def _staged(scratch_scope: Scope, lifted: bool) -> S.PrimFunc:
    """tmp = a * 2; out = tmp + 1, with tmp allocated inside or passed in after the output."""
    a, out = Buffer("a", (4,), "float32"), Buffer("out", (4,), "float32")
    tmp = Buffer("tmp", (4,), "float32", scratch_scope)
    i, j = E.Var("i"), E.Var("j")
    body = S.seq(S.For(i, E.IntImm(4), S.BufferStore(tmp, E.mul(load(a, i), 2.0), (i,))),
                 S.For(j, E.IntImm(4), S.BufferStore(out, E.add(load(tmp, j), 1.0), (j,))))
    if lifted:
        return S.PrimFunc("f", (a, out, tmp), body, 1, {WORKSPACES_ATTR: 1})
    return S.PrimFunc("f", (a, out), S.Allocate(tmp, body), 1)


def test_lift_workspaces_turns_global_scratch_into_a_trailing_parameter():
    after = lift_workspaces(_staged(Scope.GLOBAL, lifted=False))
    assert_structural_equal(after, _staged(Scope.GLOBAL, lifted=True))
    verify_primfunc(after)


def test_lift_workspaces_keeps_stack_scratch():
    before = _staged(Scope.LOCAL, lifted=False)
    expected = S.PrimFunc(before.name, before.params, before.body, 1, {WORKSPACES_ATTR: 0})
    assert_structural_equal(lift_workspaces(before), expected)


# ---------------------------------------------------------------- slice_int8_scratch

def _rows(dtype: str, consumer_index: str = "own row", sliced: bool = False, checked: bool = False) -> S.PrimFunc:
    """tmp[r, j] = a[r, j] + 1 (4 rows of 8), then out[r] = sum_j tmp[<row>, j]: unsliced, or the
    expected result of slicing tmp one row at a time inside the consumer's row loop."""
    a, out = Buffer("a", (4, 8), dtype), Buffer("out", (4,), dtype)
    tmp = Buffer("tmp", (1, 8) if sliced else (4, 8), dtype)
    r, j, rc, k = E.Var("r"), E.Var("j"), E.Var("rc"), E.Var("k")
    row = rc if consumer_index == "own row" else E.sub(E.IntImm(3), rc)

    def store_tmp(at: E.PrimExpr) -> S.Stmt:
        store = S.BufferStore(tmp, E.add(load(a, at, j), E.const(1, dtype)), (E.IntImm(0) if sliced else at, j))
        if checked:  # a status return inside the producer
            store = S.seq(S.IfThenElse(E.lt(load(a, at, j), E.const(0, dtype)), S.Return(E.IntImm(3))), store)
        return S.For(j, E.IntImm(8), store)

    consume = S.For(k, E.IntImm(8), S.BufferStore(out, E.add(load(out, rc), load(tmp, E.IntImm(0) if sliced else row, k)), (rc,)))
    if sliced:
        body: S.Stmt = S.For(rc, E.IntImm(4), S.Allocate(tmp, S.seq(store_tmp(rc), consume)))
        return S.PrimFunc("f", (a, out), body, 1)
    body = S.seq(S.For(r, E.IntImm(4), store_tmp(r), S.ForKind.PARALLEL), S.For(rc, E.IntImm(4), consume, S.ForKind.PARALLEL))
    return S.PrimFunc("f", (a, out), S.Allocate(tmp, body), 1)


def test_int8_scratch_is_computed_one_slice_at_a_time_inside_its_readers_loop():
    after = slice_int8_scratch(_rows("int8"))
    assert_structural_equal(after, _rows("int8", sliced=True))
    verify_primfunc(after)
    # the slice is scratch like any other: LiftWorkspaces hands its one row to the planner
    lifted = lift_workspaces(after)
    assert lifted.attrs[WORKSPACES_ATTR] == 1 and lifted.params[-1].shape == (1, 8)


def test_scratch_slicing_leaves_float_scratch_other_rows_and_early_returns_alone():
    for before in (_rows("float32"), _rows("int8", consumer_index="another row"), _rows("int8", checked=True)):
        assert slice_int8_scratch(before) is before


# ---------------------------------------------------------------- lowering a TE stage

def test_te_lower_accumulates_a_reduction_locally_then_runs_the_epilogue():
    x = te.placeholder((4, 6), "float32", "x")
    k = te.reduce_axis(6, "k")
    total = te.compute((4,), lambda i: te.sum(x[i, k.var], axis=k), name="s")
    plus_one = te.compute((4,), lambda i: E.add(total[i], E.FloatImm(1.0)), name="y")
    after = te.lower("f", [x], [plus_one])

    p0, out = Buffer("p0", (4, 6), "float32"), Buffer("out", (4,), "float32")
    acc = Buffer("acc", (1,), "float32", Scope.LOCAL)
    i0, r = E.Var("i0"), E.Var("k")
    zero = E.IntImm(0)
    expected = S.PrimFunc("f", (p0, out), S.For(i0, E.IntImm(4), S.seq(
        S.Allocate(acc, S.seq(
            S.BufferStore(acc, E.FloatImm(0.0), (zero,)),
            S.For(r, E.IntImm(6), S.BufferStore(acc, E.add(load(acc, zero), load(p0, i0, r)), (zero,))),
            S.BufferStore(out, load(acc, zero), (i0,)),
        )),
        S.BufferStore(out, E.add(load(out, i0), E.FloatImm(1.0)), (i0,)),  # the epilogue, in the same loop
    )), 1)
    assert_structural_equal(after, expected)
