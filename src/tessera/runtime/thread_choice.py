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
processes only ever add time to a run, and the few runs of a model taking
0.1 s each see the load change from one run to the next. One thread is
chosen only when clearly faster (by MARGIN); when the two tie, the module
uses the threads its caller asked for. The outputs do not depend on the
count (parallel loops share their iterations statically, and each element
is computed by the same code on whichever thread), only the time.
"""

from __future__ import annotations

import threading
from collections import deque

WARM_UP = 3  # timed runs of each count before choosing (the first is with cold caches)
WINDOW = 5  # the recent runs of a count whose fastest stands for it
MARGIN = 0.02  # one thread is chosen when its runs take this share less time than all threads' runs
EXPLORE_EVERY = 16  # one run in this many uses the count not chosen, to keep its time current
LONG_RUN = 3e-3  # seconds: from this run time at all threads on, runs use all threads (see above)


class ThreadChoice:
    """The thread count of each run: `choose()` before it, `record(count, seconds)` after.

    Thread-safe: one-call runs may choose and record from many threads at once.
    """

    def __init__(self, most: int) -> None:
        if most < 1:
            raise ValueError(f"most must be at least 1, got {most}")
        self.counts = (most,) if most == 1 else (most, 1)
        self._recent: dict[int, deque[float]] = {c: deque(maxlen=WINDOW) for c in self.counts}
        self._seen = {c: 0 for c in self.counts}  # timed runs per count, ever
        self._runs = 0
        self._lock = threading.Lock()

    def choose(self) -> int:
        with self._lock:
            self._runs += 1
            most = self.counts[0]
            if len(self.counts) == 1 or (self._recent[most] and min(self._recent[most]) >= LONG_RUN):
                return most
            for count in self.counts:  # warm-up: alternate, most threads first
                if self._seen[count] < WARM_UP and self._seen[count] <= min(self._seen.values()):
                    return count
            best = self._best()
            if self._runs % EXPLORE_EVERY == 0:
                return next(c for c in self.counts if c != best)
            return best

    def record(self, count: int, seconds: float) -> None:
        with self._lock:
            self._recent[count].append(seconds)
            self._seen[count] += 1

    def best(self) -> int:
        """The count whose recent runs took the least time (the most threads until both were timed)."""
        with self._lock:
            return self._best()

    def _best(self) -> int:
        if len(self.counts) == 1 or not all(self._recent.values()):
            return self.counts[0]
        most, one = (min(self._recent[c]) for c in self.counts)
        return self.counts[1] if one < most * (1 - MARGIN) else self.counts[0]
