"""How many threads a graph run uses: all it may, or one, whichever recent runs found faster.

`GraphModule(num_threads=N)` lets a run use N OpenMP threads. When other
processes keep every core busy, the team's other threads get no core of
their own: at every parallel loop the thread that finished its share first
spins (runtime/openmp_wait.py) while its partner waits for a time slice,
and the loop ends only when both are done. On a 2-core AMD EPYC (AVX-512)
with one core kept busy by another process, DenseNet-121 took 110 ms a run
at two threads against 65 ms at one, and ic_resnet8 0.88 ms on average
(0.20 ms median) against 0.29 ms. onnxruntime's pool degrades better: the
calling thread runs the work and withdraws the tasks no worker has started.
An OpenMP team cannot (its join waits for every thread), so the module
chooses per run instead: it times runs at N threads and at one, runs at the
count whose recent runs took less time, and now and then tries the other
count to notice when the load changes.

How often it tries the other count is bounded by what that costs: at most
one run in EXPLORE_EVERY, and rarer when the other count is much slower, so
that its extra time stays near EXPLORE_SHARE of the total (on a quiet
machine, DenseNet-121's one-thread runs take 28 ms more than its two-thread
ones: one in 40 runs tries one thread). But at least one run in
EXPLORE_RAREST tries it, since a count stands for its fastest recent run and
the other count's runs may all have been slowed by a passing load: right
after an onnxruntime session's runs, ic_resnet8's first two-thread runs
took 1.7 ms against 0.26 ms at one thread, and runs stayed on one thread
until a try found 0.17 ms, 256 runs later at a limit of 256. (Runs that
slow turned out to come without onnxruntime too, from the pool thread woken
onto the caller's CPU; runs now bind it elsewhere, crt/src/threads.c.)

A count stands for the fastest of its recent runs, not their median: other
processes only ever add time to a run, and they come and go between a
model's runs. One thread is chosen only when clearly faster (by MARGIN);
when the two tie, the module uses the threads its caller asked for. The
outputs do not depend on the count (parallel loops share their iterations
statically, and each element is computed by the same code on whichever
thread), only the time.
"""

from __future__ import annotations

import math
from collections import deque

WARM_UP = 3  # timed runs of each count before choosing (the first is with cold caches)
WINDOW = 5  # the recent runs of a count whose fastest stands for it
MARGIN = 0.02  # one thread is chosen when its runs take this share less time than all threads' runs
EXPLORE_EVERY = 16  # at most one run in this many uses the count not chosen, to keep its time current
EXPLORE_SHARE = 0.02  # ... and fewer, so the extra time of those runs stays about this share of the total
EXPLORE_RAREST = 64  # ... but at least one run in this many, however slow the other count (see above)


class ThreadChoice:
    """The thread count of each run: `choose()` before it, `record(count, seconds)` after.

    One-call runs may choose and record from many threads at once. Neither
    takes a lock (a lock alone cost 1 us here, against 15 us for the
    smallest model's run): a deque's append is atomic, and a race between
    two runs can only blur which one explores or leave a choice one run
    stale.
    """

    def __init__(self, most: int) -> None:
        if most < 1:
            raise ValueError(f"most must be at least 1, got {most}")
        self.counts = (most,) if most == 1 else (most, 1)
        self._most, self._one = most, self.counts[-1]
        self._warm_up = self.counts * WARM_UP if most > 1 else ()  # alternate, most threads first
        self._recent: dict[int, deque[float]] = {c: deque(maxlen=WINDOW) for c in self.counts}
        self._fastest = {c: math.inf for c in self.counts}  # of the recent runs
        self._chosen = most
        self._runs = 0
        self._explore_every = EXPLORE_EVERY  # runs between two runs at the count not chosen
        self._last_explored = 0  # the run number

    def choose(self) -> int:
        if self._most == 1:
            return self._chosen
        self._runs += 1
        runs = self._runs
        if runs <= len(self._warm_up):
            return self._warm_up[runs - 1]
        if runs - max(self._last_explored, len(self._warm_up)) >= self._explore_every:
            self._last_explored = runs
            return self._one if self._chosen == self._most else self._most
        return self._chosen

    def record(self, count: int, seconds: float) -> None:
        recent = self._recent[count]
        recent.append(seconds)
        self._fastest[count] = min(recent)
        most, one = self._fastest[self._most], self._fastest[self._one]
        timed = most < math.inf  # (one thread is never timed first: warm-up starts with all)
        self._chosen = self._one if timed and one < most * (1 - MARGIN) else self._most
        self._explore_every = _explore_every(self._fastest[self._chosen], self._fastest[self._other()])

    def _other(self) -> int:
        return self._one if self._chosen == self._most else self._most

    def best(self) -> int:
        """The count whose recent runs took the least time (the most threads until both were timed)."""
        return self._chosen


def _explore_every(chosen: float, other: float) -> int:
    """Runs between two tries of the other count, whose runs take `other` seconds against `chosen`."""
    if not (math.isfinite(chosen) and math.isfinite(other)) or chosen <= 0:
        return EXPLORE_EVERY
    extra = max(other - chosen, 0.0) / (EXPLORE_SHARE * chosen)  # runs whose time pays for one try
    return min(max(EXPLORE_EVERY, math.ceil(extra)), EXPLORE_RAREST)
