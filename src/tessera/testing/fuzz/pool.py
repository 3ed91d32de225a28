"""Worker processes that run fuzz cases, so crashes and hangs are counted.

Case `index` of a run with seed S is generated from the seed string
"S:index" in the worker, so the parent can regenerate any case (to save it)
without shipping models around, even after the worker died on it. A worker
reports the phase it enters; a worker that dies by a signal while tessera
runs is a crash, one that outlives the per-case timeout is a hang. Dying in
the reference phase (onnxruntime) only makes the graph invalid.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .check import Invalid, Kind, Outcome, reference, run_case
from .generate import Case, generate_case
from .graph import RandomChooser, Reject


def case_seed(seed: int, index: int) -> str:
    return f"{seed}:{index}"


def make_case(seed: int, index: int, avoid: frozenset[str]) -> Case:
    return generate_case(RandomChooser(case_seed(seed, index)), avoid=avoid)


@dataclass
class Result:
    """What one case index came to: invalid (not counted), or a tessera outcome."""

    index: int
    outcome: Outcome | None  # None: the graph is not a valid case
    reason: str = ""  # why it is invalid
    ops: list[str] = field(default_factory=list)
    hazards: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _worker(conn: mpc.Connection, seed: int, avoid: frozenset[str]) -> None:
    while True:
        index = conn.recv()
        if index is None:
            return
        started = time.perf_counter()
        try:
            case = make_case(seed, index, avoid)
        except Reject as err:
            conn.send(("invalid", index, f"generator: {err}"))
            continue
        except Exception as err:  # a bug of the generator, not of tessera: reported apart
            conn.send(("invalid", index, f"generator error: {type(err).__name__}: {err}"))
            continue
        conn.send(("phase", index, "reference"))
        try:
            expected = reference(case)
        except Invalid as err:
            conn.send(("invalid", index, str(err)))
            continue
        conn.send(("phase", index, "tessera"))
        outcome = run_case(case, expected)
        conn.send(("done", index, outcome.kind.value, outcome.detail, case.ops, sorted(case.hazards),
                   time.perf_counter() - started))


@dataclass
class _Slot:
    process: mp.process.BaseProcess
    conn: mpc.Connection
    index: int | None = None
    phase: str = ""
    deadline: float = 0.0


class WorkerPool:
    """`jobs` workers; `run(indices)` yields a Result per index, in completion order."""

    def __init__(self, jobs: int, seed: int, avoid: frozenset[str], timeout: float) -> None:
        self.ctx = mp.get_context("spawn")  # a clean interpreter: no forked onnxruntime threads
        self.seed, self.avoid, self.timeout = seed, avoid, timeout
        self.slots = [self._start() for _ in range(jobs)]

    def _start(self) -> _Slot:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.seed, self.avoid), daemon=True)
        proc.start()
        child.close()
        return _Slot(proc, parent)

    def _restart(self, slot: _Slot) -> None:
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join()
        slot.conn.close()
        fresh = self._start()
        slot.process, slot.conn, slot.index, slot.phase = fresh.process, fresh.conn, None, ""

    def run(self, next_index: Callable[[], int | None]) -> Iterator[Result]:
        """Hand out indices from `next_index` (None: no more) until every worker is idle."""
        for slot in self.slots:
            self._assign(slot, next_index())
        while any(s.index is not None for s in self.slots):
            busy = [s for s in self.slots if s.index is not None]
            ready = mpc.wait([s.conn for s in busy], timeout=1.0)
            for slot in busy:
                result = None
                if slot.conn in ready:
                    result = self._receive(slot)
                elif time.monotonic() > slot.deadline:
                    result = self._lost(slot, Outcome(Kind.HANG, f"no result after {self.timeout:.0f} s"))
                if result is not None:
                    slot.index = None
                    yield result
                    self._assign(slot, next_index())

    def _assign(self, slot: _Slot, index: int | None) -> None:
        slot.index, slot.phase = index, "generate"
        slot.deadline = time.monotonic() + self.timeout
        if index is not None:
            slot.conn.send(index)

    def _receive(self, slot: _Slot) -> Result | None:
        try:
            msg = slot.conn.recv()
        except (EOFError, OSError):
            slot.process.join()
            code = slot.process.exitcode
            return self._lost(slot, Outcome(Kind.CRASH, f"worker died: exit code {code}"
                                            + (f" (signal {-code})" if code is not None and code < 0 else "")))
        kind, index = msg[0], msg[1]
        if kind == "phase":
            slot.phase = msg[2]
            return None
        if kind == "invalid":
            return Result(index, None, msg[2])
        _, _, outcome_kind, detail, ops, hazards, seconds = msg
        return Result(index, Outcome(Kind(outcome_kind), detail), ops=ops, hazards=hazards, seconds=seconds)

    def _lost(self, slot: _Slot, outcome: Outcome) -> Result:
        """The worker died or hung on its case: restart it and blame the phase it was in."""
        index, phase = slot.index, slot.phase
        self._restart(slot)
        assert index is not None
        if phase != "tessera":
            return Result(index, None, f"the reference {outcome.kind.value} during {phase}: {outcome.detail}")
        return Result(index, outcome)

    def close(self) -> None:
        for slot in self.slots:
            try:
                slot.conn.send(None)
            except OSError:
                pass
        for slot in self.slots:
            slot.process.join(timeout=5)
            if slot.process.is_alive():
                slot.process.kill()


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))
