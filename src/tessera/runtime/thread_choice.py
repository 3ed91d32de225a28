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

What a count's runs cost is their mean over the last TAIL_SECONDS of the
module's run time, where both counts have at least TAIL_RUNS runs in that
time, and otherwise its fastest recent run. The mean sees a steady tail:
with one core kept busy by another process (2-core AMD EPYC Zen 3),
ic_resnet8's two-thread runs took 0.40-0.53 ms at the median, but one run
in 10-20 waited out the other process's time slice (5 ms), 0.9 ms on
average against 0.56 ms at one thread; the fastest runs alone kept it on
two threads. A small model has hundreds of runs a second at either count,
so both means are well founded and one slow run moves them little. A
larger model has few runs of the count it tries now and then, and there
the fastest run stands for each count: other processes only ever add time
to a run, and they come and go between a model's runs (a busy core slows
every parallel loop of a long run, so that shows in its fastest run too).
One thread is chosen only when clearly cheaper (by
MARGIN); when the two tie, the module uses the threads its caller asked
for. The outputs do not depend on the count (parallel loops share their
iterations statically, and each element is computed by the same code on
whichever thread), only the time.
"""

from __future__ import annotations

import math
import threading
from collections import deque

WARM_UP = 3  # timed runs of each count before choosing (the first is with cold caches)
WINDOW = 5  # the recent runs of a count whose fastest stands for it where it has few runs
TAIL_SECONDS = 1.0  # ... and where it has many: its mean over this much of the module's run time
TAIL_RUNS = 16  # ... many: at least this many runs in that time
TAIL_MOST_RUNS = 1024  # the runs kept for that mean (the smallest models run thousands a second)
MARGIN = 0.02  # one thread is chosen when its runs take this share less time than all threads' runs
EXPLORE_EVERY = 16  # at most one run in this many uses the count not chosen, to keep its time current
EXPLORE_SHARE = 0.02  # ... and fewer, so the extra time of those runs stays about this share of the total
EXPLORE_RAREST = 64  # ... but at least one run in this many, however slow the other count (see above)


class ThreadChoice:
    """The thread count of each run: `choose()` before it, `record(count, seconds)` after.

    One-call runs may choose and record from many threads at once.
    `record` holds a lock while it updates a count's runs (0.3 us, against
    15 us for the smallest model's run); `choose` takes none, since a race
    between two runs there can only blur which one explores.
    """

    def __init__(self, most: int) -> None:
        if most < 1:
            raise ValueError(f"most must be at least 1, got {most}")
        self.counts = (most,) if most == 1 else (most, 1)
        self._most, self._one = most, self.counts[-1]
        self._warm_up = self.counts * WARM_UP if most > 1 else ()  # alternate, most threads first
        self._costs = {c: _Cost() for c in self.counts}
        self._clock = 0.0  # seconds of run time so far, at either count
        self._lock = threading.Lock()
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
        with self._lock:
            self._clock += seconds
            # (warm-up runs count only among the recent ones: the first of each count had cold caches)
            self._costs[count].add(seconds, self._clock, tail=self._runs > len(self._warm_up))
            most, one = _compare(self._costs[self._most], self._costs[self._one], self._clock)
        timed = most < math.inf  # (one thread is never timed first: warm-up starts with all)
        self._chosen = self._one if timed and one < most * (1 - MARGIN) else self._most
        chosen, other = (most, one) if self._chosen == self._most else (one, most)
        self._explore_every = _explore_every(chosen, other)

    def best(self) -> int:
        """The count whose recent runs took the least time (the most threads until both were timed)."""
        return self._chosen


class _Cost:
    """The runs of one count: its last WINDOW, and those of the last TAIL_SECONDS of run time."""

    def __init__(self) -> None:
        self._recent: deque[float] = deque(maxlen=WINDOW)
        self._tail: deque[tuple[float, float]] = deque()  # (run time at its end, seconds)
        self._tail_sum = 0.0

    def add(self, seconds: float, clock: float, tail: bool) -> None:
        self._recent.append(seconds)
        if not tail:
            return
        self._tail.append((clock, seconds))
        self._tail_sum += seconds
        if len(self._tail) > TAIL_MOST_RUNS:
            self._tail_sum -= self._tail.popleft()[1]

    def tail_mean(self, clock: float) -> float | None:
        """The mean of the runs of the last TAIL_SECONDS before `clock`, if there are TAIL_RUNS of them."""
        tail = self._tail
        while tail and tail[0][0] < clock - TAIL_SECONDS:
            self._tail_sum -= tail.popleft()[1]
        return max(self._tail_sum, 0.0) / len(tail) if len(tail) >= TAIL_RUNS else None

    def fastest(self) -> float:
        return min(self._recent, default=math.inf)


def _compare(a: _Cost, b: _Cost, clock: float) -> tuple[float, float]:
    """What a run of each count costs: both tail means, or where either is unfounded, both fastest runs."""
    mean_a, mean_b = a.tail_mean(clock), b.tail_mean(clock)
    if mean_a is not None and mean_b is not None:
        return mean_a, mean_b
    return a.fastest(), b.fastest()


def _explore_every(chosen: float, other: float) -> int:
    """Runs between two tries of the other count, whose runs take `other` seconds against `chosen`."""
    if not (math.isfinite(chosen) and math.isfinite(other)) or chosen <= 0:
        return EXPLORE_EVERY
    extra = max(other - chosen, 0.0) / (EXPLORE_SHARE * chosen)  # runs whose time pays for one try
    return min(max(EXPLORE_EVERY, math.ceil(extra)), EXPLORE_RAREST)
