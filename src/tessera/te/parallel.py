"""Which loop of a stage runs on all threads, and whether it is worth it.

A parallel loop costs a fork and a join of the OpenMP team. The pool waits
passively (runtime/openmp_wait.py), so each is a futex wake of a sleeping
thread: about 7.5 us for an empty `omp parallel for` at two threads (2-core
AMD EPYC, AVX-512), against 0.3 us for the same loop serial. A stage gains
from a second thread only when its serial time is several times that.

Work is counted in multiply-adds of a reduction's inner loop, the unit gcc
vectorises best (0.02 to 0.04 ns each in a convolution's register tile
there). An element of a stage without a reduction (a padded copy, an
elementwise tail) costs much more than one: 0.1 ns in a vectorised
epilogue, 0.5 ns in a padded copy with bounds tests. So it counts as
ELEMENT_WORK, and each output element of a reduction adds it to the
reduction's extent (its initial value, its store, its epilogue).
"""

from __future__ import annotations

import math

from ..tir import expr as E
from ..tir import stmt as S
from .tensor import ComputeOp, Reduce

# Stages with less work than this run on one thread: below it the fork and
# join cost more than a second thread saves. At 1 << 16, kws_ds_cnn took
# 0.17 ms at two threads against 0.10 ms at one; at 1 << 20 both 0.09 ms,
# while DenseNet-121 keeps most of its two-thread gain (1 << 22 lost it).
PARALLEL_MIN_WORK = 1 << 20
# What one element of a stage costs, in the multiply-adds above (see the module doc).
ELEMENT_WORK = 4
# An outermost loop shorter than this shares its iterations with the next loop
# (OpenMP collapse), so two or more threads get even shares.
PARALLEL_MIN_EXTENT = 8


def stage_work(op: ComputeOp) -> int:
    """The estimated serial cost of `op`'s loops, in multiply-adds (see the module doc)."""
    elements = math.prod(a.extent for a in op.axes)
    if isinstance(op.body, Reduce):
        return elements * (math.prod(a.extent for a in op.reduce_axes) + ELEMENT_WORK)
    return elements * ELEMENT_WORK


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
