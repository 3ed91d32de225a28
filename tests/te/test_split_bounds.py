"""te.compute(split_bounds=True) (te/loop_shapes.py): padded copies without tests in their loops."""

from __future__ import annotations

import ctypes

import numpy as np

from tessera import te
from tessera.codegen.c_host import build_c_module
from tessera.relay.module import IRModule
from tessera.runtime.module import build_and_load
from tessera.target import Target
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import walk_expr


def _padded(split: bool, stride: int = 1) -> S.PrimFunc:
    """Rows of x padded by 2 on the left and 1 on the right, read with a stride; rows 0 and 4 all zeros."""
    x = te.placeholder((3, 7), "float32", "x")
    width = (7 + 3 - 1) // stride + 1

    def element(r, c):
        y, col = r - 1, c * stride - 2
        inside = E.logical_and(E.logical_and(E.ge(y, 0), E.lt(y, 3)), E.logical_and(E.ge(col, 0), E.lt(col, 7)))
        return E.select(inside, x[y, col], 0.0, guarded=True)

    out = te.compute((5, width), element, "pad", split_bounds=split)
    return te.lower(f"tsgen_test_split_{int(split)}_{stride}", [x], [out])


def _expected(xv: np.ndarray, stride: int) -> np.ndarray:
    padded = np.zeros((5, 7 + 3), np.float32)
    padded[1:4, 2:9] = xv
    return padded[:, ::stride]


def _stores(func: S.PrimFunc) -> list[S.BufferStore]:
    return [s for s in S.walk_stmts(func.body) if isinstance(s, S.BufferStore)]


def test_split_loops_store_zeros_or_copies_without_tests():
    split = _padded(split=True)
    assert not [s for s in _stores(split) if any(isinstance(e, E.Select) for e in walk_expr(s.value))]
    tests = [s for s in S.walk_stmts(split.body) if isinstance(s, S.IfThenElse)]
    assert len(tests) == 1  # the row's test, made once per row
    (unsplit,) = _stores(_padded(split=False))
    assert isinstance(unsplit.value, E.Select)


def test_split_loops_compute_the_same_values():
    xv = np.arange(21, dtype=np.float32).reshape(3, 7) + 1
    for stride in (1, 2, 3):
        funcs = [_padded(True, stride), _padded(False, stride)]
        mod = IRModule({})
        for f in funcs:
            mod = mod.with_function(f.name, f)
        so = build_and_load(build_c_module(mod, Target("c")))
        for f in funcs:
            out = np.full(_expected(xv, stride).shape, -1, np.float32)
            kernel = so.kernel(f.name)
            kernel.argtypes = [ctypes.c_void_p] * 2
            assert kernel(xv.ctypes.data, out.ctypes.data) == 0
            np.testing.assert_array_equal(out, _expected(xv, stride), err_msg=f.name)


def test_a_test_of_another_form_keeps_the_select():
    x = te.placeholder((8,), "float32", "x")
    out = te.compute((8,), lambda i: E.select(E.lt(i * i, 20), x[i], 0.0, guarded=True), "square", split_bounds=True)
    func = te.lower("tsgen_test_split_square", [x], [out])
    (store,) = _stores(func)
    assert isinstance(store.value, E.Select)
