"""Index width: int32 index arithmetic where it provably fits, int64 where it may not."""

from __future__ import annotations

import ctypes
import itertools
import random

import numpy as np
import onnx
import pytest

import tessera
from tessera import te
from tessera.backend.aot.executor import build_executor
from tessera.codegen.c_source import CodeGenC
from tessera.frontend import from_onnx
from tessera.testing import mlperf_tiny as mt
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.bounds import ARITHMETIC, BoundsAnalysis
from tessera.tir.buffer import Buffer
from tessera.tir.index_width import widen_indices

from .test_te_codegen import _compile_and_load

BIG = (65536, 32769)  # 2**31 + 65536 elements: the flat offset of the last one passes INT32_MAX


def _c(func: S.PrimFunc) -> str:
    gen = CodeGenC()
    gen.add_function(func)
    return gen.source()


def _logical_not(shape: tuple[int, ...]) -> S.PrimFunc:
    x = te.placeholder(shape, "bool", "x")
    y = te.compute(shape, lambda *i: E.logical_not(x[i]), name="y")
    return te.lower("tsgen_test_not", [x], [y])


def test_small_kernel_keeps_int32_indices():
    func = _logical_not((4, 5))
    assert widen_indices(func) is func
    text = _c(func)
    assert "for (int32_t i0 = 0; i0 < 4; ++i0)" in text
    assert "int64" not in text


def test_flat_offset_past_int32_is_computed_in_int64():
    text = _c(_logical_not(BIG))
    # each loop counter fits int32; the row-major offset does not
    assert "for (int32_t i0 = 0; i0 < 65536; ++i0)" in text
    assert "for (int32_t i1 = 0; i1 < 32769; ++i1)" in text
    assert "out[((((int64_t)(i0)) * INT64_C(32769)) + ((int64_t)(i1)))]" in text


def test_loop_past_int32_gets_an_int64_counter():
    text = _c(_logical_not((2**31 + 1,)))
    assert "for (int64_t i0 = 0; i0 < INT64_C(2147483649); ++i0)" in text
    assert "out[i0] = (!p0[i0]);" in text


def test_index_arithmetic_that_may_overflow_is_widened_even_into_a_small_buffer():
    # a reshape-like index: (i * 32769 + j) // 65536 is below 32769, but i * 32769 + j is not below 2**31
    i, j = E.Var("i"), E.Var("j")
    src = Buffer("src", (32769,), "float32")
    out = Buffer("out", BIG, "float32")
    row = E.floordiv(E.add(E.mul(i, 32769), j), 65536)
    body = S.For(i, E.IntImm(BIG[0]), S.For(j, E.IntImm(BIG[1]), S.BufferStore(out, E.BufferLoad(src, (row,), src.dtype), (i, j))))
    text = _c(S.PrimFunc("tsgen_test_rows", (src, out), body, 1))
    assert "src[((int32_t)((((((int64_t)(i)) * INT64_C(32769)) + ((int64_t)(j))) / INT64_C(65536))))]" in text


def test_a_position_used_as_a_value_is_computed_exactly():
    y = te.compute(BIG, lambda i, j: E.cast(E.add(E.mul(i, BIG[1]), j), "float32"), name="iota")
    text = _c(te.lower("tsgen_test_iota", [], [y]))
    assert "= ((float)(((((int64_t)(i0)) * INT64_C(32769)) + ((int64_t)(i1)))));" in text


def test_arithmetic_on_data_keeps_its_int32_semantics_in_a_huge_kernel():
    a = te.placeholder((2**31 + 1,), "int32", "a")
    b = te.placeholder((2**31 + 1,), "int32", "b")
    c = te.compute(a.shape, lambda i: E.add(a[i], b[i]), name="c")
    text = _c(te.lower("tsgen_test_add", [a, b], [c]))
    assert "out[i0] = (p0[i0] + p1[i0]);" in text


def _evaluate(op: E.BinOp, x: int, y: int) -> int | None:
    if op in (E.BinOp.FLOORDIV, E.BinOp.DIV, E.BinOp.FLOORMOD, E.BinOp.TRUNCMOD) and y == 0:
        return None
    trunc = int(x / y) if y else 0
    return {
        E.BinOp.ADD: lambda: x + y, E.BinOp.SUB: lambda: x - y, E.BinOp.MUL: lambda: x * y,
        E.BinOp.FLOORDIV: lambda: x // y, E.BinOp.DIV: lambda: trunc, E.BinOp.FLOORMOD: lambda: x % y,
        E.BinOp.TRUNCMOD: lambda: x - trunc * y, E.BinOp.MIN: lambda: min(x, y), E.BinOp.MAX: lambda: max(x, y),
    }[op]()


@pytest.mark.parametrize("op", sorted(ARITHMETIC, key=lambda o: o.name))
def test_bounds_hold_every_value_the_operation_can_take(op):
    rng = random.Random(op.name)
    a, b = E.Var("a"), E.Var("b")
    expr = E.BinaryOp(op, a, b, "int32")
    for _ in range(60):
        ra = sorted(rng.randint(-9, 9) for _ in range(2))
        rb = sorted(rng.randint(-9, 9) for _ in range(2))
        lo, hi = BoundsAnalysis({id(a): tuple(ra), id(b): tuple(rb)})(expr)
        values = [_evaluate(op, x, y) for x, y in itertools.product(range(ra[0], ra[1] + 1), range(rb[0], rb[1] + 1))]
        assert all(lo <= v <= hi for v in values if v is not None), (op, ra, rb, (lo, hi))


def test_bounds_of_reads_and_casts():
    buf = Buffer("b", (4,), "int64")
    load = E.BufferLoad(buf, (E.IntImm(0),), buf.dtype)
    bounds = BoundsAnalysis({})
    assert bounds(load) == (-2**63, 2**63 - 1)
    assert bounds(E.cast(load, "int32")) == (-2**31, 2**31 - 1)  # wraps: anything an int32 holds
    clamped = E.maximum(E.minimum(load, E.const(9, "int64")), E.const(0, "int64"))
    assert bounds(E.cast(clamped, "int32")) == (0, 9)
    assert bounds(E.select(E.lt(load, E.const(0, "int64")), E.IntImm(3), E.IntImm(-2))) == (-2, 3)


def test_huge_kernel_reads_past_int32_offsets():
    """A max over rows of 32769 bytes, 65536 rows: reads reach offset 2**31 + 65535."""
    x = te.placeholder(BIG, "uint8", "x")
    k = te.reduce_axis(BIG[1], "k")
    y = te.compute((BIG[0],), lambda i: te.max_reduce(x[i, k.var], k), name="rowmax")
    fn = _compile_and_load([te.lower("tsgen_test_rowmax", [x], [y])]).kernel("tsgen_test_rowmax")
    fn.argtypes = [ctypes.c_void_p] * 2
    data = np.zeros(BIG, np.uint8)  # mapped lazily: untouched pages cost no memory
    marks = {(0, 0): 5, (40000, 123): 3, (BIG[0] - 1, BIG[1] - 1): 7, (BIG[0] - 2, 0): 9}
    for at, value in marks.items():
        data[at] = value
    out = np.full(BIG[0], 255, np.uint8)
    assert fn(data.ctypes.data, out.ctypes.data) == 0
    expected = np.zeros(BIG[0], np.uint8)
    for (row, _), value in marks.items():
        expected[row] = value
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("name", list(mt.MODELS))
def test_int8_mlperf_tiny_cortex_m_kernels_keep_int32_indices(name):
    """Their C (and so the instruction counts on the boards) must not change: the pass leaves every kernel as it is."""
    mod, params = from_onnx(onnx.load(q8.model_path(name)))
    for cpu in ("cortex-m4", "cortex-m55"):
        lib = tessera.build(mod, target=f"c -mcpu={cpu}", params=params, executor="aot", mod_name=name)
        funcs = [*lib.program.kernels.values(), build_executor(lib.program)]
        assert all(widen_indices(f) is f for f in funcs), cpu
        assert not any("int64_t i" in s.text for s in lib.kernel_sources), cpu


def test_not_of_a_bool_tensor_past_2_31_elements_runs_correctly():
    """The reported crash: Not on bool[65536, 32769] wrote at a wrapped int32 offset.

    Memory stays near one 2 GiB output: the input is mapped lazily (only the
    marked pages are touched) and the one-call run reads it in place.
    """
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Not", ["x"], ["y"])], "not_big",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.BOOL, list(BIG))],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.BOOL, list(BIG))])
    mod, params = from_onnx(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]))
    lib = tessera.build(mod, params=params)
    x = np.zeros(BIG, bool)
    marks = [(0, 0), (40000, 123), (BIG[0] - 1, 0), (BIG[0] - 1, BIG[1] - 1)]
    for at in marks:
        x[at] = True
    y = lib(x)[0]
    for at in marks:
        assert not y[at], at
    assert y[BIG[0] - 1, BIG[1] - 2] and y[32768, 32768]
    assert np.count_nonzero(y) == y.size - len(marks)
