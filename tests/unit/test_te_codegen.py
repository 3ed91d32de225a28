"""TE -> TIR lowering and TIR -> C code generation."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from tessera import te
from tessera.codegen.c_host import build_c_module
from tessera.codegen.c_source import CodeGenC
from tessera.crt import INCLUDE_DIR
from tessera.relay.module import IRModule
from tessera.runtime.module import build_and_load
from tessera.target import Target
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.printer import primfunc_str


def _matmul_kernel(m: int = 4, k: int = 5, n: int = 6) -> S.PrimFunc:
    a = te.placeholder((m, k), "float32", "a")
    b = te.placeholder((k, n), "float32", "b")
    r = te.reduce_axis(k, "r")
    c = te.compute((m, n), lambda i, j: te.sum(E.mul(a[i, r.var], b[r.var, j]), r), name="c",
                   axis_names=["i", "j"], loop_order=["i", "r", "j"])
    out = te.compute((m, n), lambda i, j: E.maximum(c[i, j], E.const(0, "float32")), name="relu")
    return te.lower("tsgen_test_matmul_relu", [a, b], [out])


def test_reduction_with_outer_reduce_axis_initialises_then_updates_in_place():
    text = primfunc_str(_matmul_kernel())
    # the reduction writes straight into the output, the relu runs as an epilogue per row
    assert "allocate" not in text
    lines = [line.strip() for line in text.splitlines()]
    assert lines[1:] == [
        "for i in range(4):",
        "for j in range(6):",
        "out[i, j] = 0.0",
        "for r in range(5):",
        "for j in range(6):",
        "out[i, j] = (out[i, j] + (p0[i, r] * p1[r, j]))",
        "for j in range(6):",
        "out[i, j] = max(out[i, j], 0.0)",
    ]


def _narrowing_kernel(loop_order: list[str], register_tile: bool = False) -> S.PrimFunc:
    """An int8 x int8 -> int32 product whose output stage narrows it to int8 (as requantisation does)."""
    a = te.placeholder((4, 5), "int8", "a")
    b = te.placeholder((5, 6), "int8", "b")
    r = te.reduce_axis(5, "r")
    c = te.compute((4, 6), lambda i, j: te.sum(E.mul(E.cast(a[i, r.var], "int32"), E.cast(b[r.var, j], "int32")), r),
                   name="c", axis_names=["i", "j"], loop_order=loop_order, register_tile=register_tile)
    out = te.compute((4, 6), lambda i, j: E.cast(E.minimum(E.maximum(E.sub(c[i, j], E.const(9, "int32")),
                                                                      E.const(-128, "int32")),
                                                           E.const(127, "int32")), "int8"), name="narrow")
    return te.lower("tsgen_test_narrow", [a, b], [out])


@pytest.mark.parametrize("loop_order, register_tile", [(["i", "j", "r"], False), (["i", "r", "j"], True)],
                         ids=["local scalar", "register tile"])
def test_a_narrowing_epilogue_reads_the_local_accumulator(loop_order, register_tile):
    func = _narrowing_kernel(loop_order, register_tile)
    allocs = [s.buffer for s in S.walk_stmts(func.body) if isinstance(s, S.Allocate)]
    # the only buffer of the int32 sums is the local accumulator: no int32 tensor to plan
    assert [b.scope.name for b in allocs] == ["LOCAL"] and allocs[0].dtype == "int32"
    so = _compile_and_load([func])
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (4, 5), dtype=np.int8)
    b = rng.integers(-3, 4, (5, 6), dtype=np.int8)  # sums mostly inside int8, some saturating
    out = np.zeros((4, 6), np.int8)
    fn = so.kernel("tsgen_test_narrow")
    fn.argtypes = [ctypes.c_void_p] * 3
    assert fn(a.ctypes.data, b.ctypes.data, out.ctypes.data) == 0
    expected = np.clip(a.astype(np.int32) @ b.astype(np.int32) - 9, -128, 127)
    assert len(np.unique(expected)) > 5
    np.testing.assert_array_equal(out, expected)


def test_a_narrowing_epilogue_after_an_in_place_reduction_keeps_its_buffer():
    # the reduction updates whole rows in place, so its int32 sums need a buffer of their own
    func = _narrowing_kernel(["i", "r", "j"])
    allocs = [s.buffer for s in S.walk_stmts(func.body) if isinstance(s, S.Allocate)]
    assert [(b.name, b.dtype, b.shape) for b in allocs] == [("c_buf", "int32", (4, 6))]


def _compile_and_load(funcs: list[S.PrimFunc]):
    mod = IRModule({})
    for f in funcs:
        mod = mod.with_function(f.name, f)
    return build_and_load(build_c_module(mod, Target("c")))


def test_generated_kernel_computes_the_right_values():
    so = _compile_and_load([_matmul_kernel()])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    out = np.zeros((4, 6), np.float32)
    fn = so.kernel("tsgen_test_matmul_relu")
    fn.argtypes = [ctypes.c_void_p] * 3
    assert fn(a.ctypes.data, b.ctypes.data, out.ctypes.data) == 0
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)


def test_c_output_is_deterministic_and_warning_free(tmp_path):
    texts = []
    for _ in range(2):
        gen = CodeGenC()
        gen.add_function(_matmul_kernel())
        texts.append(gen.source())
    assert texts[0] == texts[1]
    src = tmp_path / "k.c"
    src.write_text(texts[0])
    proc = subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE_DIR}",
                           "-c", str(src), "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "int32_t tsgen_test_matmul_relu(const float* restrict p0, const float* restrict p1, float* restrict out)" in texts[0]


def test_argmax_lowering_tracks_position():
    x = te.placeholder((3, 7), "float32", "x")
    r = te.reduce_axis(7, "r")
    idx = te.compute((3,), lambda i: te.argmax(x[i, r.var], r), name="argmax")
    so = _compile_and_load([te.lower("tsgen_test_argmax", [x], [idx])])
    xv = np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)
    out = np.zeros(3, np.int64)
    fn = so.kernel("tsgen_test_argmax")
    fn.argtypes = [ctypes.c_void_p] * 2
    fn(xv.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out, xv.argmax(axis=1))


def test_index_arithmetic_folds_constants():
    i = E.Var("i")
    assert E.add(E.add(i, 2), 3) == E.add(i, 5)
    assert E.mul(i, 1) is i
    assert E.add(E.IntImm(2), E.IntImm(3)) == E.IntImm(5)
    assert E.floordiv(E.IntImm(-7), E.IntImm(2)) == E.IntImm(-4)


def test_loop_order_must_name_every_axis():
    a = te.placeholder((4,), "float32", "a")
    r = te.reduce_axis(4, "r")
    with pytest.raises(ValueError, match="loop_order"):
        te.compute((1,), lambda i: te.sum(a[r.var], r), loop_order=["i"])
