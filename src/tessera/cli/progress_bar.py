"""Progress bars on the terminal for C compilation and QEMU runs (tqdm).

The compiler reports batches and steps through `tessera.util.progress`;
this module turns them into one bar per kind of work. Batches of one kind
that overlap (a tuner builds many candidates at once, each a batch of
translation units) share a bar whose total grows, so the terminal shows
two bars at most. Bars are drawn only when stderr is a terminal and -q is
not given: piped or logged output stays free of control characters.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from ..util.progress import C_COMPILATION, QEMU_RUNS, ProgressObserver, Step, observing

UNITS = {C_COMPILATION: "file", QEMU_RUNS: "run"}  # what a step of each batch is, for the rate


@dataclass
class _Bar:
    bar: Any  # a tqdm bar (tqdm ships no type information)
    open_batches: int


class TerminalProgress(ProgressObserver):
    """One tqdm bar per batch label, alive while a batch of that label runs."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._bars: dict[str, _Bar] = {}
        self._lock = threading.Lock()

    def batch_started(self, batch: str, total: int) -> None:
        from tqdm import tqdm

        with self._lock:
            entry = self._bars.get(batch)
            if entry is None:
                # every step redraws: steps are compiler or QEMU processes, never too many to draw
                bar = tqdm(total=total, desc=batch, unit=UNITS.get(batch, "step"), file=self.stream, leave=False,
                           dynamic_ncols=True, position=len(self._bars), mininterval=0, miniters=1)
                self._bars[batch] = _Bar(bar, 1)
            else:
                entry.bar.total += total
                entry.bar.refresh()
                entry.open_batches += 1

    def step_done(self, step: Step) -> None:
        with self._lock:
            entry = self._bars.get(step.batch)
            if entry is not None:  # (a step outside any batch, e.g. one object file, draws nothing)
                entry.bar.set_postfix_str(step.name, refresh=False)
                entry.bar.update(1)

    def batch_finished(self, batch: str) -> None:
        with self._lock:
            entry = self._bars.get(batch)
            if entry is None:
                return
            entry.open_batches -= 1
            if entry.open_batches == 0:
                entry.bar.close()
                del self._bars[batch]


def wants_bar(quiet: bool, stream: TextIO) -> bool:
    """Draw bars only for a person at a terminal."""
    isatty = getattr(stream, "isatty", None)
    return not quiet and callable(isatty) and bool(isatty())


@contextlib.contextmanager
def progress_bars(quiet: bool, stream: TextIO | None = None) -> Iterator[None]:
    """Show bars on `stream` (default stderr) while the block runs, when `wants_bar`."""
    stream = stream or sys.stderr
    if not wants_bar(quiet, stream):
        yield
        return
    with observing(TerminalProgress(stream)):
        yield
