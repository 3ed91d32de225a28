"""How many threads a graph run uses: all it may, or one, whichever recent runs found faster.

`GraphModule(num_threads=N)` lets a run use N OpenMP threads. When other
processes keep every core busy, the team's other threads get no core of
their own: Linux wakes a sleeping pool thread on the core of the thread that
forked the loop, the two take turns there, and each parallel loop costs two
context switches and gains nothing. On a 2-core AMD EPYC (AVX-512) with a
load of 10, a probe loop's worker started only when the forking thread had
finished its share, and ic_resnet8 ran 0.37 ms a run at two threads against
0.32 ms at one. onnxruntime's pool degrades better: the calling thread runs
the work and withdraws the tasks no worker has started. An OpenMP team
cannot (its join waits for every thread), so the module chooses per run
instead: it times runs at N threads and at one, runs at the count whose
recent runs took less time, and tries the other count one run in
EXPLORE_EVERY to notice when the load changes.

Only short runs choose. A run whose parallel loops last milliseconds gains
from the second thread even on a busy machine (the scheduler moves it to the
other core within the loop), and its time varies with the other processes'
bursts far more than with the count (shufflenet at one thread: 6 ms a run,
then 40 ms for a second, on the machine above). Once a run at N threads
takes LONG_RUN or more, runs stay at N.

A count stands for the fastest of its recent runs, not their median: other
processes only ever add time to a run, and they come and go between a
model's runs. One thread is
chosen only when clearly faster (by MARGIN); when the two tie, the module
uses the threads its caller asked for. The outputs do not depend on the
count (parallel loops share their iterations statically, and each element
is computed by the same code on whichever thread), only the time.
"""

from __future__ import annotations

import math
from collections import deque

WARM_UP = 3  # timed runs of each count before choosing (the first is with cold caches)
WINDOW = 5  # the recent runs of a count whose fastest stands for it
MARGIN = 0.02  # one thread is chosen when its runs take this share less time than all threads' runs
EXPLORE_EVERY = 16  # one run in this many uses the count not chosen, to keep its time current
LONG_RUN = 3e-3  # seconds: from this run time at all threads on, runs use all threads (see above)


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
        self._settled = most == 1  # one count, or long runs: no choosing (see the module doc)
        self._runs = 0

    def choose(self) -> int:
        if self._settled:
            return self._chosen
        self._runs += 1
        runs = self._runs
        if runs <= len(self._warm_up):
            return self._warm_up[runs - 1]
        if runs % EXPLORE_EVERY == 0:
            return self._one if self._chosen == self._most else self._most
        return self._chosen

    def record(self, count: int, seconds: float) -> None:
        recent = self._recent[count]
        recent.append(seconds)
        self._fastest[count] = min(recent)
        most, one = self._fastest[self._most], self._fastest[self._one]
        timed = most < math.inf  # (one thread is never timed first: warm-up starts with all)
        self._settled = self._most == 1 or (timed and most >= LONG_RUN)
        self._chosen = self._one if timed and not self._settled and one < most * (1 - MARGIN) else self._most

    def best(self) -> int:
        """The count whose recent runs took the least time (the most threads until both were timed)."""
        return self._chosen
