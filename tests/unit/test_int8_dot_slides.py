"""tir/int8_dot_slides.py: a column loop around short int8 dot products (a depthwise convolution's taps)
visits two adjacent columns per iteration with one DOT_SLIDE2_INT8 call per tap row
(`ts_dot_slide2_int8`); an odd width ends with the pair one column before the last, keeping its second
sum."""

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
from tessera.tir.int8_dot_slides import slide_int8_dots

from .test_int8_dot_quads import ISA_PATHS, _calls, _source, run_on_board


def depthwise(rows: int = 3, width: int = 4, taps: int = 3, stride: int = 1, weights_move: bool = False):
    """out[y, x] = clamp(sum_{ry, rx} a[(y + ry) * W + x * stride + rx] * w[ry * taps + rx] - 5) as int8,
    W = (width - 1) * stride + taps: one channel plane of a depthwise convolution on a padded input."""
    plane_width = (width - 1) * stride + taps
    a = Buffer("a", ((rows + taps - 1) * plane_width + 1,), "int8")
    w = Buffer("w", (taps * taps + (width if weights_move else 0),), "int8")
    out = Buffer("out", (rows, width), "int8")
    acc = Buffer("acc", (1,), "int32", Scope.LOCAL)
    y, x, ry, rx = E.Var("y"), E.Var("x"), E.Var("ry"), E.Var("rx")
    zero = E.IntImm(0)
    a_index = E.add(E.add(E.mul(E.add(y, ry), E.IntImm(plane_width)), E.mul(x, E.IntImm(stride))), rx)
    w_index = E.add(E.add(E.mul(ry, E.IntImm(taps)), rx), x if weights_move else E.IntImm(0))
    product = E.mul(E.cast(E.BufferLoad(a, (a_index,), "int8"), "int32"),
                    E.cast(E.BufferLoad(w, (w_index,), "int8"), "int32"))
    total = E.BufferLoad(acc, (zero,), "int32")
    narrowed = E.cast(E.minimum(E.maximum(E.sub(total, E.IntImm(5)), E.IntImm(-128)), E.IntImm(127)), "int8")
    taps_loop = S.For(ry, E.IntImm(taps), S.For(rx, E.IntImm(taps),
                                                S.BufferStore(acc, E.add(total, product), (zero,))))
    body = S.For(y, E.IntImm(rows), S.For(x, E.IntImm(width), S.Allocate(acc, S.SeqStmt((
        S.BufferStore(acc, E.IntImm(0), (zero,)), taps_loop, S.BufferStore(out, narrowed, (y, x)))))))
    return S.PrimFunc("tsgen_depthwise", (a, w, out), body, 2)


def _expected(a: np.ndarray, w: np.ndarray, rows: int, width: int, taps: int) -> np.ndarray:
    plane_width = width - 1 + taps
    plane = a[:(rows + taps - 1) * plane_width].astype(np.int32).reshape(rows + taps - 1, plane_width)
    kernel = w.astype(np.int32).reshape(taps, taps)
    out = np.zeros((rows, width), np.int32)
    for y in range(rows):
        for x in range(width):
            out[y, x] = (plane[y:y + taps, x:x + taps] * kernel).sum()
    return np.clip(out - 5, -128, 127)


def _operands(rows: int, width: int, taps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-30, 31, (rows + taps - 1) * (width - 1 + taps) + 1, dtype=np.int8)
    w = rng.integers(-4, 5, taps * taps, dtype=np.int8)
    return a, w


def test_two_columns_per_call_for_each_tap_row():
    func = slide_int8_dots(use_int8_dot(depthwise(width=4)))
    (call,) = _calls(func)
    assert call.func is E.Intrinsic.DOT_SLIDE2_INT8 and call.dtype == "void"
    run, weights, n, *accs = call.args
    assert (run.buffer.name, weights.buffer.name, n.value) == ("a", "w", 3)
    assert len({id(a.buffer) for a in accs}) == 2 and all(a.buffer.scope is Scope.LOCAL for a in accs)
    loops = [(f.loop_var.name, f.extent.value) for f in S.walk_stmts(func.body) if isinstance(f, S.For)]
    assert loops == [("y", 3), ("x2", 2), ("ry", 3)]
    assert "ts_dot_slide2_int8(&a[(((y + ry) * 6) + (x2 * 2))], &w[(ry * 3)], 3, &acc_0, &acc_1);" in _source(func)


def test_an_odd_width_ends_with_the_pair_before_the_last_column():
    func = slide_int8_dots(use_int8_dot(depthwise(width=5)))
    rows = func.body
    pairs, last = rows.body.stmts
    assert pairs.extent.value == 2
    assert [c.func for c in _calls(func)] == [E.Intrinsic.DOT_SLIDE2_INT8] * 2
    # the last block stores column 4 only, from the pair's second sum (columns 3 and 4)
    stores = [s for s in S.walk_stmts(last) if isinstance(s, S.BufferStore) and s.buffer.name == "out"]
    (store,) = stores
    assert "out[((y * 5) + 4)] = " in _source(func) and "&a[(((y + ry) * 7) + 3)]" in _source(func)


@pytest.mark.parametrize(("width", "taps"), [(4, 3), (5, 3), (2, 3), (5, 5)],
                         ids=["even", "odd", "one pair", "5 taps (no DSP shortcut)"])
def test_the_calls_compute_the_loops(width, taps):
    rows = 3
    func = slide_int8_dots(use_int8_dot(depthwise(rows=rows, width=width, taps=taps)))
    a, w = _operands(rows, width, taps)
    out = np.zeros((rows, width), np.int8)
    gen = CodeGenC()
    gen.add_function(func)
    host = Target("c")
    so = build_and_load(CSourceModule([SourceFile("slides.c", gen.source())], gen.function_names,
                                      host.kind.toolchain(host)))
    assert so.kernel(func.name)(*(ctypes.c_void_p(v.ctypes.data) for v in (a, w, out))) == 0
    np.testing.assert_array_equal(out, _expected(a, w, rows, width, taps))


@pytest.mark.parametrize("variant", [{"width": 1}, {"stride": 2}, {"weights_move": True}],
                         ids=["one column", "stride 2", "weights per column"])
def test_column_loops_that_cannot_slide_are_left_alone(variant):
    func = use_int8_dot(depthwise(**variant))
    assert slide_int8_dots(func) is func
    assert "ts_dot_slide2_int8" not in _source(func)


@pytest.mark.parametrize(("board", "uses", "avoids"), ISA_PATHS, ids=[b for b, _, _ in ISA_PATHS])
def test_each_isa_path_computes_the_loops_on_its_board(board, uses, avoids, tmp_path):
    rows, width, taps = 4, 5, 3
    func = slide_int8_dots(use_int8_dot(depthwise(rows=rows, width=width, taps=taps)))
    a, w = _operands(rows, width, taps, seed=4)
    expected = _expected(a, w, rows, width, taps)
    assert len(np.unique(expected)) > 6
    uses = "smlatb" if uses == "smlad" else uses  # the 3-tap DSP step's halfword multiply-accumulate
    assert run_on_board(board, uses, avoids, func, a, w, rows * width, tmp_path) == expected.ravel().tolist()
