"""Which loop of a stage runs on all threads, and whether it is worth it.

A parallel loop costs a fork and a join of the OpenMP team. The pool's
threads spin a while before they sleep (runtime/openmp_wait.py), so within a
run a fork finds its threads awake; a sleeping pool made each fork a futex
wake, about 7.5 us for an empty `omp parallel for` at two threads
(2-core AMD EPYC, AVX-512), against 0.3 us for the same loop serial.

Work is counted in loop iterations, a reduction's included. Counting an
element of a copy or an elementwise tail as several multiply-adds (it costs
more: 0.1 to 0.5 ns against 0.02 to 0.04 ns in a convolution's register
tile) made the padded copies and epilogues of MobileNetV2's 56x56
convolutions parallel loops, and gcc compiled the copy outlined into its
OpenMP function slower: 0.40 ms instead of 0.31 ms for the depthwise kernel
at one thread, and no gain at two on a busy machine. So every iteration
counts one.
"""

from __future__ import annotations

import math

from ..tir import expr as E
from ..tir import stmt as S
from .tensor import ComputeOp

# Stages with less work than this run on one thread: below it the fork and
# join cost more than a second thread saves. With the spinning pool, at two
# threads: ic_resnet8 0.19 ms at 1 << 16 and at 1 << 14, 0.19 at 1 << 20;
# mobilenet_v2_block 0.23 ms at 1 << 16, 0.33 at 1 << 20 (one thread: 0.38).
# (With the old passive pool, 1 << 16 made kws_ds_cnn slower at two threads
# than at one: each wake-up cost more than the stage.)
PARALLEL_MIN_WORK = 1 << 16
# An outermost loop shorter than this shares its iterations with the next loop
# (OpenMP collapse), so two or more threads get even shares.
PARALLEL_MIN_EXTENT = 8


# A reduction with no spatial loop outside it and its one column loop innermost (a dense layer on one row:
# AlexNet's classifier, 1 x 9216 by 9216 x 4096) is memory-bound: it streams its weight once. Where its
# compute asks (`row_parts`: nn.matmul on host targets; a microcontroller has no threads nor stack), it runs as
# ROW_PARTS parts of its reduction, each part's rows on one thread into a row of partial results, then the
# partial results are combined: each thread streams a contiguous run of the weight. (Blocks of columns on
# the threads instead read a short run of every row, and made AlexNet 1.23x slower at two threads.)
ROW_PARTS = 8
MIN_PART_ROWS = 8  # rows of the reduction per part, at least
MAX_PARTIAL_BYTES = 256 * 1024  # the partial results live on the calling thread's stack


def runs_in_row_parts(rows: int, columns: int, itemsize: int, work: int) -> bool:
    """Whether a reduction of `rows` (its outermost reduce axis) into `columns` results of `itemsize` bytes,
    `work` iterations in all, is worth ROW_PARTS parts: enough work for threads, rows for every part, and
    partial results that fit MAX_PARTIAL_BYTES."""
    return (work >= PARALLEL_MIN_WORK and rows >= ROW_PARTS * MIN_PART_ROWS
            and ROW_PARTS * columns * itemsize <= MAX_PARTIAL_BYTES)


def stage_work(op: ComputeOp) -> int:
    """The loop iterations of `op`, its reduction's included (see the module doc)."""
    return math.prod(a.extent for a in (*op.axes, *op.reduce_axes))


def parallel_outer(nest: S.Stmt, work: int) -> S.Stmt:
    """`nest` with its outermost loop (two loops when it is short) run by all threads.

    Only the output's spatial loops come first in a stage's nest, and every
    iteration writes its own elements, so the iterations are independent;
    scratch inside them is declared in the loop body (private per thread).
    (Loops of one iteration, such as a batch of 1, are not in the nest:
    `loop_nest` replaces them by index 0.)
    """
    if work < PARALLEL_MIN_WORK or not isinstance(nest, S.For):
        return nest
    body = nest.body
    if isinstance(body, S.For) and E.is_const(nest.extent) and nest.extent.value < PARALLEL_MIN_EXTENT:
        body = S.For(body.loop_var, body.extent, body.body, S.ForKind.PARALLEL)
    return S.For(nest.loop_var, nest.extent, body, S.ForKind.PARALLEL)
