"""tir/int8_dot.py: int8 dot-product loops become one DOT_INT8 call, which the C code generator
writes as `ts_dot_int8` (issue 17: the rewrite lives in a TIR pass, not in the renderer)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tessera.codegen.c_source import CodeGenC
from tessera.runtime.module import CSourceModule, build_and_load
from tessera.target import Target
from tessera.target.toolchain import SourceFile
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer, Scope
from tessera.tir.int8_dot import use_int8_dot
from tessera.tir.int8_dot_pairs import pair_int8_dots


def _row_dot(a_dtype: str = "int8", step: int = 1, loop_dtype: str = "int32", rows: int = 3, n: int = 20):
    """out[r] = sum_k (int32)a[r, k * step] * (int32)b[k] over n, accumulated in a local scalar."""
    a = Buffer("a", (rows, n * step), a_dtype)
    b = Buffer("b", (n,), "int8")
    out = Buffer("out", (rows,), "int32")
    acc = Buffer("acc", (1,), "int32", Scope.LOCAL)
    r, k = E.Var("r"), E.Var("k", loop_dtype)
    zero = E.IntImm(0)
    product = E.mul(E.cast(E.BufferLoad(a, (r, E.mul(k, E.IntImm(step, loop_dtype)) if step != 1 else k), a_dtype),
                           "int32"),
                    E.cast(E.BufferLoad(b, (k,), "int8"), "int32"))
    inner = S.For(k, E.IntImm(n, loop_dtype), S.BufferStore(acc, E.add(E.BufferLoad(acc, (zero,), "int32"), product),
                                                            (zero,)))
    body = S.For(r, E.IntImm(rows), S.Allocate(acc, S.SeqStmt((
        S.BufferStore(acc, E.IntImm(0), (zero,)), inner,
        S.BufferStore(out, E.BufferLoad(acc, (zero,), "int32"), (r,))))))
    return S.PrimFunc("tsgen_row_dot", (a, b, out), body, 2), inner


def test_a_contiguous_int8_run_becomes_one_call_starting_at_its_first_element():
    func, inner = _row_dot()
    rewritten = use_int8_dot(func)
    stores = [s for s in S.walk_stmts(rewritten.body) if isinstance(s, S.BufferStore) and isinstance(s.value, E.Call)]
    assert not any(s is inner for s in S.walk_stmts(rewritten.body))
    (store,) = stores
    call = store.value
    assert call.func is E.Intrinsic.DOT_INT8 and call.dtype == "int32"
    run_a, run_b, n, acc = call.args
    assert (run_a.buffer.name, run_b.buffer.name) == ("a", "b")
    assert isinstance(run_b.offset, E.IntImm) and run_b.offset.value == 0  # b[0 + k]: starts at 0
    assert n is inner.extent and isinstance(acc, E.BufferLoad) and acc.buffer is store.buffer
    assert "ts_dot_int8(&a[(r * 20)], &b[0], 20, acc)" in _source(rewritten)


@pytest.mark.parametrize("variant", [{"a_dtype": "int16"}, {"step": 2}, {"loop_dtype": "int64"}],
                         ids=["int16 operand", "stride 2", "int64 loop"])
def test_other_loops_are_left_alone(variant):
    func, _ = _row_dot(**variant)
    assert use_int8_dot(func) is func
    assert "ts_dot_int8" not in _source(func)


def test_the_call_computes_the_loop(tmp_path):
    func, _ = _row_dot(rows=3, n=37)  # 37: the helper's 4-wide DSP steps and its tail
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (3, 37), dtype=np.int8)
    b = rng.integers(-128, 128, 37, dtype=np.int8)
    gen = CodeGenC()
    gen.add_function(func)
    host = Target("c")
    so = build_and_load(CSourceModule([SourceFile("row_dot.c", gen.source())], gen.function_names,
                                      host.kind.toolchain(host)))
    out = np.zeros(3, np.int32)
    kernel = so.kernel("tsgen_row_dot")
    assert kernel(*(ctypes.c_void_p(x.ctypes.data) for x in (a, b, out))) == 0
    np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))


def _source(func: S.PrimFunc) -> str:
    gen = CodeGenC()
    gen.add_function(func)
    return gen.source()


# ------------------------------------------------ pairs (tir/int8_dot_pairs.py)
def _channel_dots(channels: int = 4, shared_run: bool = True, n: int = 37):
    """out[p, c] = clamp(sum_k a[p, k] * w[c, k] - 5) as int8: the channel loop inside the position loop,
    each output's sum in a local scalar (the shape `te.lower` gives a requantised conv)."""
    a = Buffer("a", (3, n * (channels if not shared_run else 1)), "int8")
    w = Buffer("w", (channels, n), "int8")
    out = Buffer("out", (3, channels), "int8")
    acc = Buffer("acc", (1,), "int32", Scope.LOCAL)
    p, c, k = E.Var("p"), E.Var("c"), E.Var("k")
    zero = E.IntImm(0)
    a_index = k if shared_run else E.add(E.mul(c, E.IntImm(n)), k)
    product = E.mul(E.cast(E.BufferLoad(a, (p, a_index), "int8"), "int32"),
                    E.cast(E.BufferLoad(w, (c, k), "int8"), "int32"))
    total = E.BufferLoad(acc, (zero,), "int32")
    narrowed = E.cast(E.minimum(E.maximum(E.sub(total, E.IntImm(5)), E.IntImm(-128)), E.IntImm(127)), "int8")
    body = S.For(p, E.IntImm(3), S.For(c, E.IntImm(channels), S.Allocate(acc, S.SeqStmt((
        S.BufferStore(acc, E.IntImm(0), (zero,)),
        S.For(k, E.IntImm(n), S.BufferStore(acc, E.add(total, product), (zero,))),
        S.BufferStore(out, narrowed, (p, c)))))))
    return S.PrimFunc("tsgen_channel_dots", (a, w, out), body, 2)


def test_channels_sharing_a_run_are_visited_in_pairs(tmp_path):
    func = pair_int8_dots(use_int8_dot(_channel_dots(channels=6)))
    (call,) = [s.value for s in S.walk_stmts(func.body) if isinstance(s, S.Evaluate)]
    assert call.func is E.Intrinsic.DOT2_INT8
    loops = [s for s in S.walk_stmts(func.body) if isinstance(s, S.For)]
    assert [(f.loop_var.name, f.extent.value) for f in loops] == [("p", 3), ("c2", 3)]
    text = _source(func)
    # the C code generator then visits positions 0 and 1 by quads (int8_dot_quads), the last one by pairs
    # (3 pairs: not rows of four, int8_dot_rows)
    assert "ts_dot2_int8(&a[74], &w[((c2 * 2) * 37)], &w[(((c2 * 2) + 1) * 37)], 37, &acc0, &acc1);" in text
    rng = np.random.default_rng(1)
    # 37: the helper's 4-wide DSP steps and its tail; small values, so sums mostly stay inside int8
    a = rng.integers(-10, 11, (3, 37), dtype=np.int8)
    w = rng.integers(-4, 5, (6, 37), dtype=np.int8)
    out = np.zeros((3, 6), np.int8)
    gen = CodeGenC()
    gen.add_function(func)
    host = Target("c")
    so = build_and_load(CSourceModule([SourceFile("pairs.c", gen.source())], gen.function_names,
                                      host.kind.toolchain(host)))
    assert so.kernel("tsgen_channel_dots")(*(ctypes.c_void_p(x.ctypes.data) for x in (a, w, out))) == 0
    expected = np.clip(a.astype(np.int32) @ w.astype(np.int32).T - 5, -128, 127)
    assert len(np.unique(expected)) > 6
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("variant", [{"channels": 3}, {"shared_run": False}], ids=["odd channels", "own runs"])
def test_channel_loops_that_cannot_pair_are_left_alone(variant):
    func = use_int8_dot(_channel_dots(**variant))
    assert pair_int8_dots(func) is func
