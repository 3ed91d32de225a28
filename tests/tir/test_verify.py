"""The TIR verifier: declared buffers, bound variables, consistent dtypes, readable errors."""

from __future__ import annotations

import pytest

from tessera import te
from tessera.errors import VerificationError
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer, Scope
from tessera.tir.verify import verify_primfunc

A = Buffer("a", (4,), "float32")
OUT = Buffer("out", (4,), "float32")


def load(buf: Buffer, *indices: E.PrimExpr) -> E.PrimExpr:
    return E.BufferLoad(buf, tuple(indices), buf.dtype)


def func(body: S.Stmt, *params: Buffer) -> S.PrimFunc:
    return S.PrimFunc("f", params or (A, OUT), body, 1)


def loop(body_of, n: int = 4, var: E.Var | None = None) -> S.Stmt:
    i = var or E.Var("i")
    return S.For(i, E.IntImm(n), body_of(i))


def fails(f: S.PrimFunc, message: str) -> str:
    with pytest.raises(VerificationError, match=message) as info:
        verify_primfunc(f)
    return str(info.value)


def test_lowered_kernels_are_valid():
    x = te.placeholder((3, 5), "float32", "x")
    k = te.reduce_axis(5, "k")
    total = te.compute((3,), lambda i: te.sum(x[i, k.var], axis=k), name="total")
    scaled = te.compute((3,), lambda i: E.mul(total[i], 2.0), name="scaled")
    verify_primfunc(te.lower("k", [x], [scaled]))
    verify_primfunc(func(loop(lambda i: S.BufferStore(OUT, E.add(load(A, i), 1.0), (i,)))))


def test_an_undeclared_buffer_is_named_with_its_statement():
    tmp = Buffer("tmp", (4,), "float32")
    text = fails(func(loop(lambda i: S.BufferStore(tmp, load(A, i), (i,)))),
                 "store into buffer tmp, which is neither a parameter")
    assert text == (
        "PrimFunc f: store into buffer tmp, which is neither a parameter (a, out) nor allocated around it\n"
        "for i in range(4):\n"
        "  tmp[i] = a[i]  # <<<"
    )


def test_an_allocation_declares_its_buffer_for_its_body_only():
    tmp = Buffer("tmp", (4,), "float32", Scope.LOCAL)
    inside = S.Allocate(tmp, loop(lambda i: S.seq(S.BufferStore(tmp, load(A, i), (i,)),
                                                   S.BufferStore(OUT, load(tmp, i), (i,)))))
    verify_primfunc(func(inside))
    after = S.seq(S.Allocate(tmp, loop(lambda i: S.BufferStore(tmp, load(A, i), (i,)))),
                  loop(lambda i: S.BufferStore(OUT, load(tmp, i), (i,))))
    fails(func(after), "load from buffer tmp, which is neither a parameter")
    fails(func(S.Allocate(A, S.Evaluate(E.IntImm(0)))), "buffer a is allocated while already declared")
    fails(S.PrimFunc("f", (A, A), S.Evaluate(E.IntImm(0)), 1), "buffer a is listed twice among the parameters")


def test_a_view_is_declared_through_its_base():
    flat = Buffer("m", (2, 2), "float32")
    view = flat.view((4,))
    verify_primfunc(func(loop(lambda i: S.BufferStore(OUT, load(view, i), (i,))), flat, OUT))
    fails(func(loop(lambda i: S.BufferStore(OUT, load(view, i), (i,)))), "load from buffer m, which is neither")


def test_variables_must_be_bound_by_an_enclosing_loop_or_let():
    j = E.Var("j")
    text = fails(func(loop(lambda i: S.BufferStore(OUT, load(A, j), (i,)))),
                 "variable j is used outside any loop or let that binds it")
    assert text.endswith("for i in range(4):\n  out[i] = a[j]  # <<<")
    i = E.Var("i")
    read_after = S.seq(loop(lambda i: S.BufferStore(OUT, load(A, i), (i,)), var=i),
                       S.BufferStore(OUT, load(A, i), (E.IntImm(0),)))
    fails(func(read_after), "variable i is used outside")
    own_extent = S.For(i, i, S.BufferStore(OUT, load(A, i), (i,)))
    fails(func(own_extent), "variable i is used outside")
    v = E.Var("v")
    verify_primfunc(func(S.LetStmt(v, E.IntImm(2), S.BufferStore(OUT, load(A, v), (v,)))))


def test_sibling_loops_may_share_a_variable_nested_ones_may_not():
    i = E.Var("i")
    copy = lambda i: S.BufferStore(OUT, load(A, i), (i,))  # noqa: E731
    verify_primfunc(func(S.seq(loop(copy, var=i), loop(copy, var=i))))
    text = fails(func(S.For(i, E.IntImm(4), S.For(i, E.IntImm(4), copy(i)))),
                 "variable i is bound again inside its own scope")
    assert text.endswith("for i in range(4):\n  for i in range(4):  # <<<")


def test_binary_operands_share_a_dtype_and_give_the_right_result_dtype():
    i = E.Var("i")
    mixed = E.BinaryOp(E.BinOp.ADD, load(A, i), E.FloatImm(1.0, "float64"), "float32")
    fails(func(S.For(i, E.IntImm(4), S.BufferStore(OUT, mixed, (i,)))), "operands of \\+ disagree: float32 vs float64")
    as_float = E.BinaryOp(E.BinOp.LT, load(A, i), E.FloatImm(0.0), "float32")
    fails(func(S.For(i, E.IntImm(4), S.BufferStore(OUT, as_float, (i,)))),
          "< of float32 operands is typed float32, expected bool")
    ints = E.BinaryOp(E.BinOp.AND, i, i, "bool")
    fails(func(S.For(i, E.IntImm(4), S.IfThenElse(ints, S.BufferStore(OUT, load(A, i), (i,))))),
          "operands of && are int32, expected bool")
    shift = E.BinaryOp(E.BinOp.SHL, load(A, i), load(A, i), "float32")
    fails(func(S.For(i, E.IntImm(4), S.BufferStore(OUT, shift, (i,)))), "operands of << are float32, expected integers")


def test_stores_loads_and_indices_agree_with_their_buffer():
    fails(func(loop(lambda i: S.BufferStore(OUT, E.cast(load(A, i), "int32"), (i,)))),
          "stores a int32 value into float32 buffer out")
    fails(func(loop(lambda i: S.BufferStore(OUT, E.BufferLoad(A, (i,), "float64"), (i,)))),
          "load from float32 buffer a is typed float64")
    fails(func(loop(lambda i: S.BufferStore(OUT, load(A, i, i), (i,)))), r"load from a \(shape \[4\]\) with 2 indices")
    fails(func(loop(lambda i: S.BufferStore(OUT, load(A, E.cast(i, "float32")), (i,)))),
          "load from a with a float32 index float32\\(i\\)")


def test_conditions_are_bool():
    i = E.Var("i")
    copy = S.BufferStore(OUT, load(A, i), (i,))
    fails(func(S.For(i, E.IntImm(4), S.IfThenElse(i, copy))), "the condition of an if is int32, expected bool")
    pick = E.Select(i, load(A, i), E.FloatImm(0.0), "float32")
    fails(func(S.For(i, E.IntImm(4), S.BufferStore(OUT, pick, (i,)))), "the condition of a select is int32")
    verify_primfunc(func(S.For(i, E.IntImm(4), S.IfThenElse(E.lt(i, 2), copy, copy))))


def test_loop_and_let_variables_match_their_values():
    i, v = E.Var("i"), E.Var("v", "int64")
    fails(func(S.For(i, E.IntImm(4, "int64"), S.Evaluate(E.IntImm(0)))),
          "loop i is int32 but its extent is int64")
    fails(func(S.LetStmt(v, E.IntImm(1), S.Evaluate(E.IntImm(0)))), "let v is int64 but its value is int32")


def test_immediates_fit_their_dtype_except_exact_int32_index_arithmetic():
    small = Buffer("small", (4,), "int8")
    fails(func(loop(lambda i: S.BufferStore(small, E.IntImm(300, "int8"), (i,))), A, small),
          "integer immediate 300 does not fit its dtype int8")
    # index arithmetic is exact until WidenIndices picks int64 where int32 overflows
    verify_primfunc(func(S.For(E.Var("i"), E.IntImm(2**31 + 1), S.Evaluate(E.IntImm(0)))))


def test_intrinsics_and_leftover_tensor_reads():
    i = E.Var("i")
    bad = E.Call(E.Intrinsic.EXP, (E.cast(i, "int32"),), "int32")
    fails(func(S.For(i, E.IntImm(4), S.BufferStore(OUT, E.cast(bad, "float32"), (i,)))),
          "exp of a int32 value is typed int32, expected a float argument")
    nan = E.Call(E.Intrinsic.ISNAN, (load(A, i),), "float32")
    fails(func(S.For(i, E.IntImm(4), S.IfThenElse(E.ne(nan, 0.0), S.Evaluate(E.IntImm(0))))),
          "isnan of a float32 value is typed float32")
    x = te.placeholder((4,), "float32", "x")
    read = E.ProducerLoad(x, (i,), "float32")
    fails(func(S.For(i, E.IntImm(4), S.BufferStore(OUT, read, (i,)))), "ProducerLoad\\) is left after lowering")


def test_an_else_branch_is_shown_in_the_excerpt():
    i, j = E.Var("i"), E.Var("j")
    body = S.For(i, E.IntImm(4), S.IfThenElse(E.lt(i, 2), S.Evaluate(E.IntImm(0)),
                                              S.BufferStore(OUT, load(A, j), (i,))))
    text = fails(func(body), "variable j")
    assert text.endswith("for i in range(4):\n  else:  # of if (i < 2):\n    out[i] = a[j]  # <<<")


def _call_with_map(element_map: E.PrimExpr) -> S.PrimFunc:
    """A kernel handing `element_map` to an extern call, as a fused GEMM entry takes a tail's map."""
    return func(S.Evaluate(E.call("ts_extern", [E.BufferPtr(OUT, E.IntImm(0)), element_map], "void")))


def test_an_element_map_binds_its_variable_in_its_body_alone():
    v = E.Var("v", "float32")
    silu = E.div(v, E.add(E.const(1.0, "float32"), E.call(E.Intrinsic.EXP, [E.neg(v)], "float32")))
    verify_primfunc(_call_with_map(E.ElementMap(v, silu)))
    i = E.Var("i")
    outside = func(loop(lambda i: S.Evaluate(E.call("ts_extern", [E.ElementMap(v, E.add(v, E.cast(i, "float32")))],
                                                    "void")), var=i))
    fails(outside, "variable i is used outside any loop or let that binds it")  # only v inside a map
    fails(_call_with_map(E.ElementMap(v, E.add(v, load(A, E.IntImm(0))))), "an element map reads a buffer")
    fails(_call_with_map(E.ElementMap(v, E.cast(v, "int32"))), "an element map of float32 values computes int32")
