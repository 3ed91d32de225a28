"""A run's thread count: all it may use, or one, whichever recent runs found faster (runtime/thread_choice.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op import elemwise as ew
from tessera.op.nn import conv
from tessera.runtime.thread_choice import (BURST, EXPLORE_EVERY, EXPLORE_RAREST, EXPLORE_SHARE, MARGIN, WARM_UP,
                                           WINDOW, ThreadChoice)

MS = 1e-3  # a run's seconds
SRC = str(Path(tessera.__file__).resolve().parents[1])


def _runs(choice: ThreadChoice, seconds: dict[int, float], n: int) -> list[int]:
    """The counts of `n` runs, each taking `seconds[count]`."""
    counts = []
    for _ in range(n):
        count = choice.choose()
        choice.record(count, seconds[count])
        counts.append(count)
    return counts


def test_warm_up_times_all_threads_then_one_each_after_a_run_not_recorded():
    choice = ThreadChoice(4)
    assert choice.counts == (4, 1)
    assert BURST == WARM_UP + 1  # a try's first run wakes the pool: it alone is not recorded
    assert _runs(choice, {4: MS, 1: 2 * MS}, 2 * BURST) == [4] * BURST + [1] * BURST


def test_settled_once_every_count_is_timed_and_stays_so():
    choice = ThreadChoice(2)
    counts = []
    seconds = {2: MS, 1: 1.05 * MS}  # one thread close behind: tried every EXPLORE_EVERY runs
    while not choice.settled:
        counts += _runs(choice, seconds, 1)
    assert counts == [2] * BURST + [1] * BURST  # the first try's last run settles it
    later = []
    for _ in range(2 * EXPLORE_EVERY):  # later tries included
        later += _runs(choice, seconds, 1)
        assert choice.settled
    assert 1 in later
    assert ThreadChoice(1).settled  # nothing to choose


@pytest.mark.parametrize("faster", [1, 2])
def test_runs_use_the_faster_count_and_try_the_other_in_bursts_now_and_then(faster):
    choice = ThreadChoice(2)
    seconds = {faster: MS, 3 - faster: (1 + 2 * MARGIN) * MS}  # close: trying the other costs little
    _runs(choice, seconds, 2 * BURST + 2 * EXPLORE_EVERY)
    later = _runs(choice, seconds, 4 * EXPLORE_EVERY)
    assert later.count(3 - faster) == 4 * BURST  # one burst in EXPLORE_EVERY runs
    first = later.index(3 - faster)
    assert later[first:first + BURST] == [3 - faster] * BURST
    assert choice.best() == faster


@pytest.mark.parametrize(("slower", "every"), [(1.5, round(BURST * 0.5 / EXPLORE_SHARE)), (100, EXPLORE_RAREST)])
def test_a_much_slower_count_is_tried_less_often(slower, every):
    choice = ThreadChoice(2)
    seconds = {2: MS, 1: slower * MS}
    _runs(choice, seconds, 2 * BURST + EXPLORE_RAREST)
    later = _runs(choice, seconds, 3 * every)
    # the tries' extra time stays near EXPLORE_SHARE of the total, but the other count is still tried
    assert later.count(1) == 3 * BURST


def test_a_tie_keeps_the_threads_asked_for():
    choice = ThreadChoice(2)
    _runs(choice, {2: MS, 1: (1 - MARGIN / 2) * MS}, 2 * BURST + EXPLORE_EVERY)
    assert choice.best() == 2


def test_a_run_slowed_by_another_process_does_not_count_against_its_count():
    choice = ThreadChoice(2)
    # warm-up: the third recorded run at two threads hit a busy core; the first run at each count is not recorded
    for seconds in (50 * MS, MS, MS, 9 * MS, 50 * MS, 2 * MS, 2 * MS, 2 * MS):
        count = choice.choose()
        choice.record(count, seconds)
    assert choice.best() == 2  # the slowest of its recent runs is left out


def test_a_steady_load_on_the_other_core_chooses_one_thread_though_some_runs_at_two_are_fast():
    """With another process on the second core, runs at two threads are fast while it is off its core and
    slow while it is on: their mean, not their fastest, stands for them."""
    choice = ThreadChoice(2)
    two = iter([0.2 * MS, 1.7 * MS] * 1000)
    for _ in range(2 * BURST + 2 * EXPLORE_EVERY):
        count = choice.choose()
        choice.record(count, next(two) if count == 2 else 0.5 * MS)
    assert choice.best() == 1


def test_a_slow_first_run_of_every_try_does_not_keep_the_other_count_away():
    """The first run of a try wakes the pool thread (slow); the runs after it are what the count costs."""
    choice = ThreadChoice(2)
    previous = None
    for _ in range(2 * BURST + 4 * EXPLORE_EVERY):
        count = choice.choose()
        choice.record(count, (20 * MS if count != previous else 0) + (MS if count == 2 else 2 * MS))
        previous = count
    assert choice.best() == 2


def test_long_runs_choose_too():
    choice = ThreadChoice(2)
    # a busy core makes every parallel loop of a long run wait as well (openmp_wait.py)
    assert _runs(choice, {2: 0.2, 1: 0.1}, 2 * BURST + 1)[-1] == 1
    assert choice.best() == 1


def test_a_change_of_load_changes_the_choice():
    choice = ThreadChoice(2)
    _runs(choice, {2: MS, 1: 2 * MS}, 2 * BURST + EXPLORE_EVERY)
    assert choice.best() == 2
    # another process takes the second core: two threads now take turns on one
    _runs(choice, {2: 3 * MS, 1: 2 * MS}, 2 * WINDOW)  # (a try of one thread may come between)
    assert choice.best() == 1


def test_one_thread_is_never_a_choice():
    choice = ThreadChoice(1)
    assert choice.counts == (1,) and _runs(choice, {1: MS}, 5) == [1] * 5
    with pytest.raises(ValueError, match="at least 1, got 0"):
        ThreadChoice(0)


def _depthwise():
    rng = np.random.default_rng(4)
    shape = (1, 96, 56, 56)  # its convolution is a parallel loop (te/parallel.py)
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    w = relay.const(rng.standard_normal((96, 1, 3, 3)).astype(np.float32))
    y = ew.relu(conv.conv2d(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=96))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((x,), y)))
    return lib, rng.standard_normal(shape).astype(np.float32)


def test_a_module_gives_the_same_outputs_at_whichever_count_it_chooses():
    lib, x = _depthwise()
    assert tessera.GraphModule(lib, adaptive_threads=False).threads_chosen is None  # OpenMP decides
    assert tessera.GraphModule(lib, num_threads=2, adaptive_threads=False).threads_chosen == 2
    reference = tessera.GraphModule(lib, num_threads=1)(x)[0]
    adaptive = tessera.GraphModule(lib, num_threads=2)
    for _ in range(2 * BURST + 2):  # runs at both counts
        np.testing.assert_array_equal(adaptive(x)[0], reference)
    assert adaptive.threads_chosen in (1, 2) and adaptive.threads_settled
    assert tessera.GraphModule(lib, num_threads=2, adaptive_threads=False).threads_settled  # no choice to make


def test_without_a_thread_count_runs_choose_between_openmps_and_one(tmp_path):
    """OpenMP's default count (here OMP_NUM_THREADS=3) is chosen against one thread like any other."""
    lib, _ = _depthwise()
    path = lib.export_library(tmp_path / "model.tar")
    code = (f"import tessera; lib = tessera.load_module({str(path)!r}); gm = tessera.GraphModule(lib); "
            "print(gm.threads_chosen, gm._thread_choice.counts)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env.update(PYTHONPATH=SRC, OMP_NUM_THREADS="3")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "(3,", "1)"]
