"""Progress of slow batches of outside work: C compiler runs and QEMU runs.

The compiler core tells whoever listens that a batch started, that one of
its steps finished (with its time, and whether a cached result served it),
and that the batch ended. The command line listens, to draw a progress bar
and to print per-unit compiler times; a library user can install their own
`ProgressObserver`. Nothing is drawn unless someone listens, so the core
needs no terminal library.

The installed observers are process-wide (not per thread) on purpose:
translation units compile in worker threads, which must report to the
observer the main thread installed. Observers must therefore be
thread-safe.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

C_COMPILATION = "C compilation"  # batch label: translation units through the C compiler
QEMU_RUNS = "QEMU runs"  # batch label: programs run on an emulated board


@dataclass(frozen=True, slots=True)
class Step:
    """One finished step of a batch."""

    batch: str  # the batch label, e.g. C_COMPILATION
    name: str  # what ran: a translation unit's file name, an ELF file's name
    seconds: float  # wall time of the step (near zero when cached)
    cached: bool = False  # served from the object cache, no compiler ran


class ProgressObserver:
    """Hooks for batches of slow work; subclasses override what they need."""

    def batch_started(self, batch: str, total: int) -> None: ...

    def step_done(self, step: Step) -> None: ...

    def batch_finished(self, batch: str) -> None: ...


_observers: list[ProgressObserver] = []
_lock = threading.Lock()


@contextlib.contextmanager
def observing(observer: ProgressObserver) -> Iterator[ProgressObserver]:
    """Report batches and steps to `observer` while the block runs."""
    with _lock:
        _observers.append(observer)
    try:
        yield observer
    finally:
        with _lock:
            _observers.remove(observer)


def _current() -> tuple[ProgressObserver, ...]:
    with _lock:
        return tuple(_observers)


@contextlib.contextmanager
def batch(label: str, total: int) -> Iterator[None]:
    """Announce a batch of `total` steps around the block that runs them."""
    observers = _current()
    for obs in observers:
        obs.batch_started(label, total)
    try:
        yield
    finally:
        for obs in observers:
            obs.batch_finished(label)


def report(step: Step) -> None:
    """Tell every observer that a step finished (callable from any thread)."""
    for obs in _current():
        obs.step_done(step)


class StepLog(ProgressObserver):
    """Keeps every finished step (e.g. for `tessera compile --timings`)."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self._lock = threading.Lock()

    def step_done(self, step: Step) -> None:
        with self._lock:
            self.steps.append(step)

    def of(self, batch: str) -> list[Step]:
        with self._lock:
            return [s for s in self.steps if s.batch == batch]
