"""te.extern: a C function over whole buffers as one stage among ordinary computes."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tessera import te
from tessera.codegen.c_host import build_c_module
from tessera.codegen.c_source import CodeGenC
from tessera.relay.module import IRModule
from tessera.runtime.module import build_and_load
from tessera.target import Target
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.printer import primfunc_str


class _WithMemcpy(CodeGenC):
    """memcpy stands in for a library function: it reads and writes whole buffers."""

    def preamble_lines(self) -> list[str]:
        return [*super().preamble_lines(), "#include <string.h>"]


def _run(func: S.PrimFunc, *arrays: np.ndarray) -> None:
    so = build_and_load(build_c_module(IRModule({}).with_function(func.name, func), Target("c"), codegen_class=_WithMemcpy))
    kernel = so.kernel(func.name)
    kernel.argtypes = [ctypes.c_void_p] * len(arrays)
    assert kernel(*(a.ctypes.data for a in arrays)) == 0


def _copy(shape):
    """An extern body copying its one input into its output."""
    return lambda ins, out: te.call_extern("memcpy", te.pointer(out), te.pointer(ins[0]), 4 * int(np.prod(shape)))


def _allocated(func: S.PrimFunc) -> list[S.Allocate]:
    return [s for s in S.walk_stmts(func.body) if isinstance(s, S.Allocate)]


def test_elementwise_stages_after_an_extern_update_its_result_in_place():
    x, b = te.placeholder((3, 4), "float32", "x"), te.placeholder((4,), "float32", "b")
    y = te.extern((3, 4), [x], _copy((3, 4)), "copy")
    biased = te.compute((3, 4), lambda i, j: y[i, j] + b[j], "bias")
    out = te.compute((3, 4), lambda i, j: E.maximum(biased[i, j], E.FloatImm(0.0)), "relu")
    func = te.lower("tsgen_test_extern_epilogue", [x, b], [out])
    assert not _allocated(func)  # the copy writes `out`; bias and relu are one stage updating it
    lines = [line.strip() for line in primfunc_str(func).splitlines()]
    assert lines[1] == "call_extern memcpy(&out[0], &p0[0], 48)"
    assert lines[-1] == "out[i0, i1] = max((out[i0, i1] + p1[i1]), 0.0)"
    xv = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    bv = np.arange(4, dtype=np.float32) - 2
    result = np.zeros((3, 4), np.float32)
    _run(func, xv, bv, result)
    np.testing.assert_array_equal(result, np.maximum(xv + bv, 0))


def test_every_input_of_an_extern_has_a_buffer():
    x = te.placeholder((2, 3), "float32", "x")
    doubled = te.compute((2, 3), lambda i, j: x[i, j] * 2.0, "doubled")  # would be inlined into a compute
    y = te.extern((2, 3), [doubled], _copy((2, 3)), "copy")
    func = te.lower("tsgen_test_extern_input", [x], [y])
    assert [a.buffer.name for a in _allocated(func)] == ["doubled_buf"]
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = np.zeros((2, 3), np.float32)
    _run(func, xv, result)
    np.testing.assert_array_equal(result, 2 * xv)


def test_a_result_read_at_other_indices_keeps_its_own_buffer():
    x = te.placeholder((3, 3), "float32", "x")
    y = te.extern((3, 3), [x], _copy((3, 3)), "copy")
    out = te.compute((3, 3), lambda i, j: y[j, i] + 1.0, "transpose")
    func = te.lower("tsgen_test_extern_transpose", [x], [out])
    assert [a.buffer.name for a in _allocated(func)] == ["copy_buf"]
    xv = np.arange(9, dtype=np.float32).reshape(3, 3)
    result = np.zeros((3, 3), np.float32)
    _run(func, xv, result)
    np.testing.assert_array_equal(result, xv.T + 1)


def test_two_externs_never_share_the_stage_that_reads_both():
    x = te.placeholder((4,), "float32", "x")
    y1 = te.extern((4,), [x], _copy((4,)), "first")
    y2 = te.extern((4,), [x], _copy((4,)), "second")
    total = te.compute((4,), lambda i: y1[i] + y2[i], "sum")
    func = te.lower("tsgen_test_two_externs", [x], [total])
    assert len(_allocated(func)) == 1  # one extern writes `out`, the other its own buffer
    xv = np.arange(4, dtype=np.float32)
    result = np.zeros(4, np.float32)
    _run(func, xv, result)
    np.testing.assert_array_equal(result, 2 * xv)


def test_per_iteration_stages_run_inside_the_extern_loops_in_a_tile_sized_buffer():
    x = te.placeholder((5, 8), "float32", "x")
    row = te.axis(5, "row")
    scaled = te.compute((8,), lambda j: x[row.var, j] * 3.0, "scaled", materialize=True)
    y = te.extern((5, 8), [scaled], lambda ins, out: te.call_extern(
        "memcpy", te.pointer(out, row.var, 0), te.pointer(ins[0]), 32), "rows", loops=[row], per_iteration=[scaled])
    func = te.lower("tsgen_test_per_iteration", [x], [y])
    (alloc,) = _allocated(func)
    assert alloc.buffer.shape == (8,)  # one row, not the whole (5, 8) input
    loop = next(s for s in S.walk_stmts(func.body) if isinstance(s, S.For))
    assert loop.loop_var is row.var and loop.kind is S.ForKind.SERIAL
    xv = np.arange(40, dtype=np.float32).reshape(5, 8)
    result = np.zeros((5, 8), np.float32)
    _run(func, xv, result)
    np.testing.assert_array_equal(result, 3 * xv)


def test_per_iteration_stages_must_be_computes():
    x = te.placeholder((2,), "float32", "x")
    with pytest.raises(ValueError, match="only compute stages"):
        te.extern((2,), [x], _copy((2,)), "copy", per_iteration=[x])


def test_pointer_takes_no_index_or_one_per_dimension():
    b = Buffer("b", (2, 3, 4), "float32")
    assert te.pointer(b) == E.BufferPtr(b, E.IntImm(0))
    i = E.Var("i")
    row_major = E.add(E.mul(E.add(E.mul(E.add(E.mul(E.IntImm(0), 2), 1), 3), i), 4), 2)
    assert te.pointer(b, 1, i, 2) == E.BufferPtr(b, row_major)
    with pytest.raises(IndexError, match="b has 3 dims, indexed with 2"):
        te.pointer(b, 1, 2)


def test_serial_loops_drop_loops_of_one_iteration():
    nest = te.serial_loops([3, 1, 2], lambda a, b, c: te.call_extern("f", a, b, c), ["a", "b", "c"])
    loops = [s for s in S.walk_stmts(nest) if isinstance(s, S.For)]
    assert [(s.loop_var.name, s.extent.value) for s in loops] == [("a", 3), ("c", 2)]
    (call,) = [s for s in S.walk_stmts(nest) if isinstance(s, S.Evaluate)]
    assert call.value.func == "f" and call.value.args[1] == E.IntImm(0)
