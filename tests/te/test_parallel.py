"""Which loops of a stage run on all threads (te/parallel.py), and that they compute what one thread does."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay, te
from tessera.op import elemwise as ew
from tessera.op.nn import conv
from tessera.op.nn.conv import ConvAttrs, conv_reference
from tessera.op.nn.matmul import matmul
from tessera.te.parallel import MIN_PART_ROWS, PARALLEL_MIN_EXTENT, PARALLEL_MIN_WORK, ROW_PARTS, stage_work
from tessera.tir import expr as E
from tessera.tir import stmt as S

# the fewest elements an elementwise stage needs for a parallel loop
MIN_ELEMENTS = PARALLEL_MIN_WORK
AVX2 = "c -mcpu=x86-64-v3"  # where one-row products keep the plain schedule, and so its row parts


def _relu(shape: tuple[int, ...]) -> S.PrimFunc:
    x = te.placeholder(shape, "float32", "x")
    out = te.compute(shape, lambda *i: E.maximum(x[i], E.const(0.0, "float32")), "relu")
    return te.lower("tsgen_test_relu", [x], [out])


def _row_sums(rows: int, cols: int, length: int) -> tuple[te.Tensor, S.PrimFunc]:
    a = te.placeholder((rows, length), "float32", "a")
    b = te.placeholder((length, cols), "float32", "b")
    k = te.reduce_axis(length, "k")
    out = te.compute((rows, cols), lambda i, j: te.sum(a[i, k.var] * b[k.var, j], k), "matmul")
    return out, te.lower("tsgen_test_matmul", [a, b], [out])


def _parallel_loops(func: S.PrimFunc) -> list[S.For]:
    return [s for s in S.walk_stmts(func.body) if isinstance(s, S.For) and s.kind is S.ForKind.PARALLEL]


def _extents(loops: list[S.For]) -> list[int]:
    return [loop.extent.value for loop in loops]


def test_work_counts_every_loop_iteration_a_reductions_included():
    x = te.placeholder((3, 5), "float32", "x")
    assert stage_work(te.compute((3, 5), lambda i, j: x[i, j] * 2.0, "double").op) == 15
    out, _ = _row_sums(3, 5, 7)
    assert stage_work(out.op) == 15 * 7


def test_an_elementwise_stage_shares_its_outer_loop_from_min_elements_on():
    rows = 64  # at least PARALLEL_MIN_EXTENT: no collapse
    assert rows >= PARALLEL_MIN_EXTENT
    cols = MIN_ELEMENTS // rows
    assert rows * cols == MIN_ELEMENTS  # (the constants are powers of two)
    assert _extents(_parallel_loops(_relu((rows, cols)))) == [rows]
    assert _parallel_loops(_relu((rows, cols - 1))) == []


def test_a_short_outer_loop_is_collapsed_with_the_next():
    short = PARALLEL_MIN_EXTENT // 2
    loops = _parallel_loops(_relu((short, 256, MIN_ELEMENTS // (short * 256))))
    assert _extents(loops) == [short, 256]
    assert loops[0].body is loops[1]  # directly nested: one collapse(2) pragma covers both


def test_a_reduction_counts_its_multiply_adds():
    rows, cols = 16, 64
    length = PARALLEL_MIN_WORK // (rows * cols)  # exactly PARALLEL_MIN_WORK
    assert _extents(_parallel_loops(_row_sums(rows, cols, length)[1])) == [rows]
    assert _parallel_loops(_row_sums(rows, cols, length - 1)[1]) == []


def test_the_pragma_stands_on_the_shared_loop_of_the_generated_c():
    short = PARALLEL_MIN_EXTENT // 2
    shape = (1, short, 256, MIN_ELEMENTS // (short * 256))
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((x,), ew.relu(x))))
    lines = [line.strip() for c in lib.c_sources.values() for line in c.splitlines()]
    at = lines.index("TS_PARALLEL_FOR_2")  # the batch loop of 1 is gone; channels and rows are shared
    assert lines[at + 1].endswith(f"< {short}; ++i1) {{") and lines[at + 2].endswith("< 256; ++i2) {")
    assert "TS_PARALLEL_FOR" not in lines


def _depthwise_block(channels: int, size: int) -> tuple[relay.IRModule, np.ndarray, np.ndarray]:
    """A padded 3x3 depthwise convolution and ReLU."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    x = relay.Var("x", relay.TensorType((1, channels, size, size), "float32"))
    y = ew.relu(conv.conv2d(x, relay.const(w), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                            groups=channels))
    data = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    return relay.IRModule.from_expr(relay.Function((x,), y)), data, w


@pytest.mark.parametrize("threads", [2, 3])
def test_parallel_stages_compute_the_bits_of_one_thread(threads):
    channels, size = 96, 56  # MobileNetV2's expanded 56x56 stage: its convolution is a parallel loop
    mod, x, w = _depthwise_block(channels, size)
    lib = tessera.build(mod)
    pragmas = [line for c in lib.c_sources.values() for line in c.splitlines()
               if line.strip() in ("TS_PARALLEL_FOR", "TS_PARALLEL_FOR_2")]
    assert pragmas
    one = tessera.GraphModule(lib, num_threads=1)(x)[0]
    many = tessera.GraphModule(lib, num_threads=threads)(x)[0]
    assert np.array_equal(one, many)  # static partitioning: each element computed by the same code
    expected = np.maximum(conv_reference([x, w], ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), channels)), 0)
    np.testing.assert_allclose(one, expected, rtol=1e-5, atol=1e-5)


def _dense_row(length: int, cols: int) -> tuple[relay.IRModule, np.ndarray, np.ndarray, np.ndarray]:
    """A dense layer on one row, with bias and ReLU: x (1, length) . w (length, cols) + b."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((length, cols)).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    x = relay.Var("x", relay.TensorType((1, length), "float32"))
    y = ew.relu(ew.add(matmul(x, relay.const(w)), relay.const(b)))
    data = rng.standard_normal((1, length)).astype(np.float32)
    return relay.IRModule.from_expr(relay.Function((x,), y)), data, w, b


@pytest.mark.parametrize("length", [ROW_PARTS * 2 * 64, ROW_PARTS * 64 + 3])  # paired rows; ragged parts
def test_a_dense_layer_on_one_row_runs_as_row_parts_on_all_threads(length):
    cols = PARALLEL_MIN_WORK // 64 // 2 + 5  # work = length x cols >= PARALLEL_MIN_WORK
    mod, x, w, b = _dense_row(length, cols)
    lib = tessera.build(mod, target=AVX2)  # (AVX-512 reads one-row products as packed panels instead)
    source = "\n".join(lib.c_sources.values())
    assert f"_parts[{ROW_PARTS * cols}]" in source  # the partial results, one row per part
    loops = [line.strip() for line in source.splitlines()]
    at = loops.index("TS_PARALLEL_FOR")
    assert loops[at + 1].endswith(f"< {ROW_PARTS}; ++rk_part) {{")  # the parts are what the threads share
    one = tessera.GraphModule(lib, num_threads=1, adaptive_threads=False)(x)[0]
    two = tessera.GraphModule(lib, num_threads=2, adaptive_threads=False)(x)[0]
    assert np.array_equal(one, two)  # the parts and their combination do not depend on the thread count
    expected = np.maximum(x.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(one[0], expected[0], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("length", "target"), [(ROW_PARTS * MIN_PART_ROWS, AVX2),  # 2 K multiply-adds
                                                 (ROW_PARTS * 2 * 64, "c -mcpu=cortex-m4")])  # no threads
def test_a_dense_layer_on_one_row_keeps_one_loop_when_parts_would_not_pay(length, target):
    mod, x, w, b = _dense_row(length, 16 if target == AVX2 else PARALLEL_MIN_WORK // 64 // 2 + 5)
    if target == AVX2:
        source = "\n".join(tessera.build(mod, target=AVX2).c_sources.values())
    else:  # a microcontroller's build is standalone C for the AOT executor
        source = "\n".join(f.text for f in tessera.build(mod, target=target, executor="aot").kernel_sources)
    assert "_parts[" not in source and "TS_PARALLEL_FOR" not in [line.strip() for line in source.splitlines()]
