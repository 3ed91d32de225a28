"""Structural equality of TIR: alpha-equivalence, scopes, views, and readable differences."""

from __future__ import annotations

import pytest

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer, Scope
from tessera.tir.printer import expr_str
from tessera.tir.structural import assert_structural_equal, first_difference, structural_equal


def load(buf: Buffer, *indices: E.PrimExpr) -> E.PrimExpr:
    return E.BufferLoad(buf, tuple(indices), buf.dtype)


def add_one(name: str = "f", n: int = 4, var: str = "i", dtype: str = "float32") -> S.PrimFunc:
    """out[i] = a[i] + 1, built afresh: new variables and buffers at every call."""
    a, out = Buffer(f"a_{var}", (n,), dtype), Buffer(f"out_{var}", (n,), dtype)
    i = E.Var(var)
    body = S.For(i, E.IntImm(n), S.BufferStore(out, E.add(load(a, i), E.const(1, dtype)), (i,)))
    return S.PrimFunc(name, (a, out), body, 1)


def test_functions_built_apart_are_equal_whatever_their_names():
    assert structural_equal(add_one(var="i"), add_one(var="k"))
    assert_structural_equal(add_one(var="i"), add_one(var="k"))


@pytest.mark.parametrize("other, expected", [
    (add_one(n=8), "at root.params[0]: buffers a_i and a_i differ in shape: (4,) vs (8,)"),
    (add_one(dtype="float64"), "at root.params[0]: buffers a_i and a_i differ in dtype: float32 vs float64"),
    (add_one(name="g"), "at root: name 'f' vs 'g'"),
])
def test_the_first_difference_says_where_and_what(other, expected):
    assert first_difference(add_one(), other) == f"first difference {expected}"


def test_a_different_operator_is_found_in_the_stored_value():
    a, out, i = Buffer("a", (4,), "float32"), Buffer("out", (4,), "float32"), E.Var("i")
    plus = S.For(i, E.IntImm(4), S.BufferStore(out, E.add(load(a, i), E.FloatImm(1.0)), (i,)))
    times = S.For(i, E.IntImm(4), S.BufferStore(out, E.mul(load(a, i), E.FloatImm(2.0)), (i,)))
    diff = first_difference(plus, times)
    assert diff == "first difference at root.body.value: (a[i] + 1.0) vs (a[i] * 2.0)"


def test_assert_structural_equal_prints_both_sides():
    loop = add_one().body
    assert isinstance(loop, S.For)
    longer = S.For(loop.loop_var, E.IntImm(5), loop.body, loop.kind)
    with pytest.raises(AssertionError, match=r"(?s)^first difference at root\.extent: 4 vs 5\n"
                                             r"--- left:\nfor i in range\(4\):.*--- right:\nfor i in range\(5\):"):
        assert_structural_equal(loop, longer)


def test_free_variables_and_buffers_must_be_the_same_objects_unless_mapped():
    f, g = add_one(), add_one()
    # the bodies alone: their buffers are free (the parameters that define them are not compared)
    assert not structural_equal(f.body, g.body)
    assert "free buffers" in first_difference(f.body, g.body)
    assert structural_equal(f.body, g.body, map_free_vars=True)
    assert structural_equal(f.body, f.body)
    i, j = E.Var("i"), E.Var("j")
    assert structural_equal(E.add(i, 1), E.add(i, 1))
    assert not structural_equal(E.add(i, 1), E.add(j, 1))
    assert structural_equal(E.add(i, 1), E.add(j, 1), map_free_vars=True)


def test_variables_correspond_one_to_one():
    i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
    out = Buffer("out", (4, 4), "int32")
    rows = S.For(i, E.IntImm(4), S.For(j, E.IntImm(4), S.BufferStore(out, i, (i, j))))
    cols = S.For(i, E.IntImm(4), S.For(j, E.IntImm(4), S.BufferStore(out, j, (i, j))))
    assert not structural_equal(rows, cols)
    # a free variable mapped once keeps its partner
    assert not structural_equal(E.add(i, j), E.add(k, k), map_free_vars=True)


def test_definitions_are_scoped_sibling_loops_may_share_a_variable():
    out = Buffer("out", (4,), "int32")
    i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
    shared = S.seq(S.For(i, E.IntImm(4), S.BufferStore(out, i, (i,))), S.For(i, E.IntImm(4), S.BufferStore(out, i, (i,))))
    apart = S.seq(S.For(j, E.IntImm(4), S.BufferStore(out, j, (j,))), S.For(k, E.IntImm(4), S.BufferStore(out, k, (k,))))
    assert structural_equal(shared, apart)
    assert structural_equal(apart, shared)
    # a loop variable read after its loop is free there: not the same as the next loop's variable
    after = S.seq(S.For(j, E.IntImm(4), S.BufferStore(out, j, (j,))), S.BufferStore(out, j, (E.IntImm(0),)))
    again = S.seq(S.For(k, E.IntImm(4), S.BufferStore(out, k, (k,))), S.BufferStore(out, k, (E.IntImm(0),)))
    assert not structural_equal(after, again)
    assert structural_equal(after, after)


def test_an_extent_is_compared_outside_its_loop():
    out = Buffer("out", (4,), "int32")
    n, i = E.Var("n"), E.Var("i")
    # `for i in range(i)` reads a free i, not the loop's own: it is not `for i in range(n)` with n free
    own = S.For(i, i, S.BufferStore(out, i, (i,)))
    other = S.For(i, n, S.BufferStore(out, i, (i,)))
    assert structural_equal(own, own)
    assert not structural_equal(own, other)


def test_lets_and_allocations_define_what_they_bind():
    out = Buffer("out", (2,), "float32")

    def build() -> S.Stmt:
        v = E.Var("v")
        scratch = Buffer("scratch", (2,), "float32", Scope.LOCAL)
        return S.LetStmt(v, E.IntImm(1), S.Allocate(scratch, S.seq(
            S.BufferStore(scratch, E.FloatImm(0.5), (v,)), S.BufferStore(out, load(scratch, v), (v,)))))

    assert structural_equal(build(), build())
    v = E.Var("v")
    wide = Buffer("scratch", (3,), "float32", Scope.LOCAL)
    other = S.LetStmt(v, E.IntImm(1), S.Allocate(wide, S.BufferStore(out, load(wide, v), (v,))))
    assert "differ in shape: (2,) vs (3,)" in first_difference(build(), other)


def test_views_match_views_of_matching_buffers():
    def build() -> S.PrimFunc:
        a, out = Buffer("a", (2, 3), "float32"), Buffer("out", (6,), "float32")
        i = E.Var("i")
        flat = a.view((6,))
        return S.PrimFunc("f", (a, out), S.For(i, E.IntImm(6), S.BufferStore(out, load(flat, i), (i,))), 1)

    assert structural_equal(build(), build())


def test_immediates_compare_by_value_and_dtype():
    assert structural_equal(E.FloatImm(float("nan")), E.FloatImm(float("nan")))
    assert not structural_equal(E.FloatImm(0.0), E.FloatImm(-0.0))
    assert "dtypes int32 vs int64" in first_difference(E.IntImm(1), E.IntImm(1, "int64"))
    assert not structural_equal(E.IntImm(1), E.FloatImm(1.0))


def test_element_maps_compare_by_their_bodies_whatever_their_variables():
    u, v = E.Var("u", "float32"), E.Var("v", "float32")
    tanh_u = E.ElementMap(u, E.call(E.Intrinsic.TANH, [u], "float32"))
    assert structural_equal(tanh_u, E.ElementMap(v, E.call(E.Intrinsic.TANH, [v], "float32")))
    assert not structural_equal(tanh_u, E.ElementMap(v, E.call(E.Intrinsic.EXP, [v], "float32")))
    assert not structural_equal(tanh_u, E.ElementMap(v, E.call(E.Intrinsic.TANH, [u], "float32")))  # u is free there
    assert expr_str(tanh_u) == "map(u => tanh(u))"
