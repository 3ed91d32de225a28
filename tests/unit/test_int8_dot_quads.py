"""tir/int8_dot_quads.py: a position loop around paired channel dot products visits two positions per
iteration with one DOT2X2_INT8 call (`ts_dot2x2_int8`), odd extents ending with one DOT2 step; and, on
the boards, every int8 dot helper's ISA path (plain C, DSP, Helium), rows of four (int8_dot_rows) too."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from tessera.codegen.c_source import CodeGenC
from tessera.micro import build_elf, get_board, run, symbol_range
from tessera.runtime.module import CSourceModule, build_and_load
from tessera.target import Target
from tessera.target.toolchain import SourceFile
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer, Scope
from tessera.tir.functor import walk_expr
from tessera.tir.int8_dot import use_int8_dot
from tessera.tir.int8_dot_pairs import pair_int8_dots
from tessera.tir.int8_dot_quads import quad_int8_dots
from tessera.tir.int8_dot_rows import row_int8_dots
from tessera.tir.simplify import constant_difference


def position_dots(positions: int = 4, channels: int = 4, n: int = 37, run_step: int | None = None,
                  weights_move: bool = False, extra: bool = False) -> S.PrimFunc:
    """out[c, p] = clamp(sum_k a[p * step + k] * w[c, k] - 5) as int8, NCHW-like output: position loop p
    around channel loop c, each sum in a local scalar (the shape `te.lower` gives a requantised conv).

    run_step: distance between the runs of positions p and p + 1 (default n; 0: every position reads one
    run); weights_move: the weight row also depends on p; extra: another statement beside the channel loop.
    """
    step = n if run_step is None else run_step
    a = Buffer("a", (max(positions * step, 1) + n,), "int8")
    w = Buffer("w", (channels + (positions if weights_move else 0), n), "int8")
    out = Buffer("out", (channels, positions), "int8")
    acc = Buffer("acc", (1,), "int32", Scope.LOCAL)
    p, c, k = E.Var("p"), E.Var("c"), E.Var("k")
    zero = E.IntImm(0)
    row = E.add(c, p) if weights_move else c
    product = E.mul(E.cast(E.BufferLoad(a, (E.add(E.mul(p, E.IntImm(step)), k),), "int8"), "int32"),
                    E.cast(E.BufferLoad(w, (row, k), "int8"), "int32"))
    total = E.BufferLoad(acc, (zero,), "int32")
    narrowed = E.cast(E.minimum(E.maximum(E.sub(total, E.IntImm(5)), E.IntImm(-128)), E.IntImm(127)), "int8")
    channel_loop = S.For(c, E.IntImm(channels), S.Allocate(acc, S.SeqStmt((
        S.BufferStore(acc, E.IntImm(0), (zero,)),
        S.For(k, E.IntImm(n), S.BufferStore(acc, E.add(total, product), (zero,))),
        S.BufferStore(out, narrowed, (c, p))))))
    body: S.Stmt = channel_loop
    if extra:
        body = S.SeqStmt((S.BufferStore(out, E.IntImm(0, "int8"), (E.IntImm(0), p)), channel_loop))
    return S.PrimFunc("tsgen_position_dots", (a, w, out), S.For(p, E.IntImm(positions), body), 2)


def _passes(func: S.PrimFunc) -> S.PrimFunc:
    """The int8 dot passes up to this one, in the C code generator's order."""
    return quad_int8_dots(pair_int8_dots(use_int8_dot(func)))


def _calls(func: S.PrimFunc) -> list[E.Call]:
    return [s.value for s in S.walk_stmts(func.body) if isinstance(s, S.Evaluate) and isinstance(s.value, E.Call)]


def _source(func: S.PrimFunc) -> str:
    gen = CodeGenC()
    gen.add_function(func)
    return gen.source()


def _run_on_host(func: S.PrimFunc, positions: int, channels: int, n: int, step: int, seed: int = 0) -> None:
    """Build `func` with the host C compiler and compare its output with NumPy."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-10, 11, positions * step + n, dtype=np.int8)  # small values: sums mostly inside int8
    w = rng.integers(-4, 5, (channels, n), dtype=np.int8)
    out = np.zeros((channels, positions), np.int8)
    gen = CodeGenC()
    gen.add_function(func)
    host = Target("c")
    so = build_and_load(CSourceModule([SourceFile("quads.c", gen.source())], gen.function_names,
                                      host.kind.toolchain(host)))
    assert so.kernel(func.name)(*(ctypes.c_void_p(x.ctypes.data) for x in (a, w, out))) == 0
    runs = np.stack([a[p * step:p * step + n] for p in range(positions)]).astype(np.int32)
    expected = np.clip(w.astype(np.int32) @ runs.T - 5, -128, 127)
    assert len(np.unique(expected)) > 6
    np.testing.assert_array_equal(out, expected)


def test_two_positions_by_two_channels_per_call():
    func = _passes(position_dots(positions=4, channels=4))
    (call,) = _calls(func)
    assert call.func is E.Intrinsic.DOT2X2_INT8 and call.dtype == "void"
    run, run_step, rows, row_step, n, *accs = call.args
    assert (run.buffer.name, rows.buffer.name) == ("a", "w")
    assert (run_step.value, row_step.value, n.value) == (37, 37, 37)
    assert len({id(a.buffer) for a in accs}) == 4 and all(a.buffer.scope is Scope.LOCAL for a in accs)
    loops = [s for s in S.walk_stmts(func.body) if isinstance(s, S.For)]
    assert [(f.loop_var.name, f.extent.value) for f in loops] == [("p2", 2), ("c2", 2)]
    # one epilogue store per (position, channel), each reading its own accumulator
    stores = [s for s in S.walk_stmts(func.body) if isinstance(s, S.BufferStore) and s.buffer.name == "out"]
    read = [next(n.buffer for n in _loads(s.value) if n.buffer.scope is Scope.LOCAL) for s in stores]
    assert len(stores) == 4 and len({id(b) for b in read}) == 4
    text = _source(func)
    assert "ts_dot2x2_int8(&a[((p2 * 2) * 37)], 37, &w[((c2 * 2) * 37)], 37, 37, " in text
    assert "ts_dot2_int8(" not in text


def _loads(e: E.PrimExpr) -> list[E.BufferLoad]:
    return [n for n in walk_expr(e) if isinstance(n, E.BufferLoad)]


@pytest.mark.parametrize(("positions", "n", "step"), [(4, 37, 37), (6, 16, 16), (3, 45, 45), (5, 8, 12), (2, 3, 3)],
                         ids=["even, byte tail", "even, whole words", "odd, every DSP step", "odd, gaps between runs",
                              "short runs"])
def test_the_calls_compute_the_loops(positions, n, step):
    func = _passes(position_dots(positions=positions, channels=6, n=n, run_step=step))
    assert _calls(func)[0].func is E.Intrinsic.DOT2X2_INT8
    _run_on_host(func, positions, 6, n, step)


def test_an_odd_extent_ends_with_one_paired_step_at_the_last_position():
    func = _passes(position_dots(positions=3, channels=6))  # 3 pairs: no rows of four after it
    assert isinstance(func.body, S.SeqStmt)
    quads, last = func.body.stmts
    assert isinstance(quads, S.For) and quads.extent.value == 1
    quad_call, pair_call = _calls(func)
    assert (quad_call.func, pair_call.func) == (E.Intrinsic.DOT2X2_INT8, E.Intrinsic.DOT2_INT8)
    assert isinstance(last, S.For) and last.loop_var.name == "c2"
    assert "ts_dot2_int8(&a[74], " in _source(func)  # position 2 (the last) at 2 * 37


def grid_dots(rows: int, width: int, out_width: int, n: int = 12, channels: int = 6) -> S.PrimFunc:
    """out[c, y, x] = clamp(sum_k a[(y * width + x) * n + k] * w[c, k] - 5) over a rows x width grid
    (out rows out_width apart: position-major when out_width == width), loops y, x, c."""
    a = Buffer("a", (rows * width * n,), "int8")
    w = Buffer("w", (channels, n), "int8")
    out = Buffer("out", (channels, rows, out_width), "int8")
    acc = Buffer("acc", (1,), "int32", Scope.LOCAL)
    y, x, c, k = E.Var("y"), E.Var("x"), E.Var("c"), E.Var("k")
    zero = E.IntImm(0)
    position = E.add(E.mul(y, E.IntImm(width)), x)
    product = E.mul(E.cast(E.BufferLoad(a, (E.add(E.mul(position, E.IntImm(n)), k),), "int8"), "int32"),
                    E.cast(E.BufferLoad(w, (c, k), "int8"), "int32"))
    total = E.BufferLoad(acc, (zero,), "int32")
    narrowed = E.cast(E.minimum(E.maximum(E.sub(total, E.IntImm(5)), E.IntImm(-128)), E.IntImm(127)), "int8")
    body = S.For(c, E.IntImm(channels), S.Allocate(acc, S.SeqStmt((
        S.BufferStore(acc, E.IntImm(0), (zero,)),
        S.For(k, E.IntImm(n), S.BufferStore(acc, E.add(total, product), (zero,))),
        S.BufferStore(out, narrowed, (c, y, x))))))
    loops = S.For(y, E.IntImm(rows), S.For(x, E.IntImm(width), body), S.ForKind.PARALLEL)
    return S.PrimFunc("tsgen_grid_dots", (a, w, out), loops, 2)


def _run_grid_on_host(func: S.PrimFunc, rows: int, width: int, out_width: int, n: int = 12, channels: int = 6):
    rng = np.random.default_rng(2)
    a = rng.integers(-10, 11, rows * width * n, dtype=np.int8)
    w = rng.integers(-4, 5, (channels, n), dtype=np.int8)
    out = np.zeros((channels, rows, out_width), np.int8)
    gen = CodeGenC()
    gen.add_function(func)
    host = Target("c")
    so = build_and_load(CSourceModule([SourceFile("grid.c", gen.source())], gen.function_names,
                                      host.kind.toolchain(host)))
    assert so.kernel(func.name)(*(ctypes.c_void_p(v.ctypes.data) for v in (a, w, out))) == 0
    sums = w.astype(np.int32) @ a.reshape(rows * width, n).astype(np.int32).T
    expected = np.clip(sums - 5, -128, 127).reshape(channels, rows, width)
    np.testing.assert_array_equal(out[:, :, :width], expected)


def test_odd_rows_of_a_position_major_grid_are_collapsed_into_one_position_loop():
    func = _passes(grid_dots(rows=5, width=3, out_width=3))
    quads, last = func.body.stmts  # 15 positions: 7 quads, then the last one by pairs
    assert (quads.loop_var.name, quads.extent.value, quads.kind) == ("y_x2", 7, S.ForKind.PARALLEL)
    assert [c.func for c in _calls(func)] == [E.Intrinsic.DOT2X2_INT8, E.Intrinsic.DOT2_INT8]
    assert "ts_dot2_int8(&a[168], " in _source(func)  # position 14 at 14 * 12
    _run_grid_on_host(func, 5, 3, 3)


def test_odd_rows_with_gaps_between_them_keep_a_paired_step_per_row():
    func = _passes(grid_dots(rows=5, width=3, out_width=4))  # out rows 4 apart: y * 3 + x is no address
    rows = func.body
    assert (rows.loop_var.name, rows.extent.value) == ("y", 5)
    quads, last = rows.body.stmts
    assert (quads.loop_var.name, quads.extent.value) == ("x2", 1)
    assert [c.func for c in _calls(func)] == [E.Intrinsic.DOT2X2_INT8, E.Intrinsic.DOT2_INT8]
    _run_grid_on_host(func, 5, 3, 4)


@pytest.mark.parametrize("variant", [{"positions": 1}, {"run_step": 0}, {"channels": 3}, {"weights_move": True},
                                     {"extra": True}],
                         ids=["one position", "one run for all", "odd channels (no pairs)", "weights per position",
                              "more than the channel loop"])
def test_position_loops_that_cannot_pair_are_left_alone(variant):
    func = pair_int8_dots(use_int8_dot(position_dots(**variant)))
    assert quad_int8_dots(func) is func
    assert "ts_dot2x2_int8" not in _source(func)


def test_constant_difference():
    x, y = E.Var("x"), E.Var("y")
    a = E.mul(E.add(E.mul(x, E.IntImm(5)), y), E.IntImm(64))
    moved = E.mul(E.add(E.mul(x, E.IntImm(5)), E.add(y, E.IntImm(1))), E.IntImm(64))
    assert constant_difference(moved, a) == 64
    assert constant_difference(a, a) == 0
    assert constant_difference(E.mul(x, y), E.IntImm(0)) is None  # not affine: an opaque term
    assert constant_difference(E.add(a, x), a) is None


# ------------------------------------------------ on the boards: each ISA path of ts_dot2x2_int8
# (board, the instruction its inner step must use, instructions it must not use): plain C on the M3,
# the DSP extension (SMLAD) on the M4, Helium (VMLAVA, tail-predicated) on the M55
ISA_PATHS = [("mps2-an385", None, ("smlad", "vmlava")), ("mps2-an386", "smlad", ("vmlava",)),
             ("mps3-an547", "vmlava", ("smlad",))]
BOARD_MAIN = r"""#include <stdio.h>
#include <stdint.h>
int32_t %(name)s(const int8_t* a, const int8_t* w, int8_t* out);
static const int8_t a[] = {%(a)s}, w[] = {%(w)s};
static int8_t out[%(out)d];
int main(void) {
  if (%(name)s(a, w, out) != 0) return 1;
  for (int i = 0; i < %(out)d; ++i) printf("%%d ", out[i]);
  printf("\n");
  return 0;
}
"""


def run_on_board(board: str, uses: str | None, avoids: tuple[str, ...], func: S.PrimFunc, a: np.ndarray,
                 w: np.ndarray, outputs: int, tmp_path) -> list[int]:
    """The int8 outputs of kernel `func(a, w, out)` run on `board`, after checking that the kernel's code
    takes the ISA path named (contains `uses`, none of `avoids`)."""
    text = {"name": func.name, "a": ", ".join(map(str, a.ravel())), "w": ", ".join(map(str, w.ravel())),
            "out": outputs}
    elf = build_elf(board, [SourceFile("kernel.c", _source(func)), SourceFile("main.c", BOARD_MAIN % text)], (),
                    tmp_path, name="dots")
    result = run(board, elf, timeout=60)
    assert result.exit_code == 0, result.stderr
    lo, hi = symbol_range(elf, func.name)
    arch = ["-marmv8.1-m.main"] if get_board(board).cpu == "cortex-m55" else []
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", *arch, f"--start-address={lo}", f"--stop-address={hi}",
                          str(elf.path)], capture_output=True, text=True, check=True).stdout
    assert func.name in asm
    if uses:
        assert uses in asm
    assert not any(insn in asm for insn in avoids)
    return [int(v) for v in result.stdout.split()]


# (kernel shape, the helpers it calls): 5 positions x 6 channels take quads and a last paired step (3 pairs:
# no rows); 1 position x 12 channels (a dense layer) takes rows of four
BOARD_KERNELS = {"quads": (5, 6, [E.Intrinsic.DOT2X2_INT8, E.Intrinsic.DOT2_INT8]),
                 "rows": (1, 12, [E.Intrinsic.DOT4_INT8])}


@pytest.mark.parametrize("kernel", list(BOARD_KERNELS))
@pytest.mark.parametrize(("board", "uses", "avoids"), ISA_PATHS, ids=[b for b, _, _ in ISA_PATHS])
def test_each_isa_path_computes_the_loops_on_its_board(board, uses, avoids, kernel, tmp_path):
    # 45 = 2 * 16 + 8 + 4 + 1: each of the DSP loops' steps and the byte tail, two full MVE vectors and a
    # predicated one; runs 48 apart (gaps between them)
    positions, channels, helpers = BOARD_KERNELS[kernel]
    n, step = 45, 48
    func = row_int8_dots(_passes(position_dots(positions=positions, channels=channels, n=n, run_step=step)))
    assert [c.func for c in _calls(func)] == helpers
    rng = np.random.default_rng(3)
    a = rng.integers(-10, 11, positions * step + n, dtype=np.int8)  # small values: sums mostly inside int8
    w = rng.integers(-4, 5, (channels, n), dtype=np.int8)
    outputs = run_on_board(board, uses, avoids, func, a, w, channels * positions, tmp_path)
    runs = np.stack([a[p * step:p * step + n] for p in range(positions)]).astype(np.int32)
    expected = np.clip(w.astype(np.int32) @ runs.T - 5, -128, 127)
    assert len(np.unique(expected)) > 6
    assert outputs == expected.ravel().tolist()
