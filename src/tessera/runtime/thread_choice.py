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

It tries the other count in bursts of BURST runs, and the first run of a
burst (or of any switch) is not recorded: it wakes the pool thread, which
slept through the runs at one thread. Timed one at a time, tries looked
slow for that reason alone: in the benchmark's pattern (blocks of runs with
onnxruntime runs and sleeps between them) ic_resnet8's two-thread tries
averaged 0.84-1.3 ms against about 0.45 ms for two-thread runs back to
back, and a module that had chosen one thread never came back to two.

A count stands for the mean of its recent recorded runs, the slowest left
out (one run hit by a passing process). Not their fastest: with another
process keeping one core busy, runs at two threads are fast whenever that
process happens to be off its core and slow otherwise, so their fastest
kept two threads chosen while their mean was worse than one thread's (on a
2-core AMD EPYC, Zen 3: ic_resnet8 0.98 ms a run on average at two threads,
0.61 ms fixed at one; now 0.64-0.65 ms, against 0.55 fixed at one and
0.92-1.01 fixed at two). One thread is chosen only when clearly faster (by
MARGIN, 10%); when the two tie, the module uses the threads its caller
asked for. (With a margin of 2%, a few slow runs at two threads on a quiet
machine moved ic_resnet8's module to one thread: 0.47 ms a run against
0.40-0.44 ms fixed at two.) The outputs do not depend on the count (parallel loops share their
iterations statically, and each element is computed by the same code on
whichever thread), only the time.

How often it tries the other count is bounded by what that costs: at most
one burst in EXPLORE_EVERY runs, and rarer when the other count is much
slower, so that the extra time of the bursts stays near EXPLORE_SHARE of
the total. But at least one in EXPLORE_RAREST runs, so that a change of
load is noticed.
"""

from __future__ import annotations

import math
from collections import deque

WARM_UP = 3  # recorded runs of each count before choosing
WINDOW = 8  # the recent recorded runs of a count whose mean (the slowest left out) stands for it
BURST = 4  # runs at the other count per try; the first is not recorded (see above)
MARGIN = 0.1  # one thread is chosen when its runs take this share less time than all threads' runs (see above)
EXPLORE_EVERY = 64  # at most one burst in this many runs, to keep the other count's time current
EXPLORE_SHARE = 0.02  # ... and fewer, so the extra time of the bursts stays about this share of the total
EXPLORE_RAREST = 256  # ... but at least one in this many runs, however slow the other count


class ThreadChoice:
    """The thread count of each run: `choose()` before it, `record(count, seconds)` after.

    One-call runs may choose and record from many threads at once. Neither
    takes a lock (a lock alone cost 1 us here, against 15 us for the
    smallest model's run; choosing and recording take about 1.4 us a run): a
    deque's append is atomic, and a race between two runs can only blur
    which one explores, drop or keep one run's time, or leave a choice one
    run stale. (A sorted window made it 7.5-9 us a run, so a count's cost is
    its sum less its maximum, kept per count; the interval between tries is
    worked out only once EXPLORE_EVERY runs have passed: every run, it took
    0.9 us of the 2.3 on a Zen 4.)
    """

    def __init__(self, most: int) -> None:
        if most < 1:
            raise ValueError(f"most must be at least 1, got {most}")
        self.counts = (most,) if most == 1 else (most, 1)
        self._most, self._one = most, self.counts[-1]
        self._recent: dict[int, deque[float]] = {c: deque(maxlen=WINDOW) for c in self.counts}
        self._costs = {c: math.inf for c in self.counts}  # `_cost` of each count's recent runs
        self._chosen = most
        self._runs = 0
        self._burst: tuple[int, int] = (most, 0)  # (count, runs left) of the try under way
        self._last_explored = 0  # the run number
        self._previous: int | None = None  # the count of the last run recorded or not

    def choose(self) -> int:
        if self._most == 1:
            return self._chosen
        self._runs += 1
        count, left = self._burst
        if left > 0:
            self._burst = (count, left - 1)
            return count
        other = self._other()
        since = self._runs - self._last_explored
        if len(self._recent[self._chosen]) >= WARM_UP and (
                len(self._recent[other]) < WARM_UP
                # the interval only when it may have come: it is never under EXPLORE_EVERY (0.9 us saved a run)
                or (since >= EXPLORE_EVERY and since >= _explore_every(self._costs[self._chosen], self._costs[other]))):
            self._last_explored = self._runs
            self._burst = (other, BURST - 1)
            return other
        return self._chosen

    def record(self, count: int, seconds: float) -> None:
        previous, self._previous = self._previous, count
        if previous != count:
            return  # the first run at a count: its pool thread was asleep (or the caches cold)
        recent = self._recent[count]
        recent.append(seconds)
        costs = self._costs
        costs[count] = _cost(recent)
        most, one = costs[self._most], costs[self._one]
        self._chosen = self._one if one < most * (1 - MARGIN) else self._most  # (False while one is inf)

    @property
    def settled(self) -> bool:
        """Every count has WARM_UP recorded runs (the first try is over): from here on the count not chosen
        runs only in a burst once in `_explore_every` runs."""
        return self._most == 1 or all(len(r) >= WARM_UP for r in self._recent.values())

    def _other(self) -> int:
        return self._one if self._chosen == self._most else self._most

    def best(self) -> int:
        """The count whose recent runs took the least time (the most threads until both were timed)."""
        return self._chosen


def _cost(recent: deque[float]) -> float:
    """A count's time a run: the mean of its recent runs but the slowest (inf before WARM_UP of them)."""
    if len(recent) < WARM_UP:
        return math.inf
    return (sum(recent) - max(recent)) / (len(recent) - 1)


def _explore_every(chosen: float, other: float) -> int:
    """Runs between two tries of the other count, whose runs take `other` seconds against `chosen`."""
    if not (math.isfinite(chosen) and math.isfinite(other)) or chosen <= 0:
        return EXPLORE_EVERY
    extra = BURST * max(other - chosen, 0.0) / (EXPLORE_SHARE * chosen)  # runs whose time pays for one try
    return min(max(EXPLORE_EVERY, math.ceil(extra)), EXPLORE_RAREST)
