"""The tuning log: measured schedule configurations per workload, as JSON on disk.

The file is a list of records {"op", "key", "config", "seconds", "target",
"cpu"}; `best` answers the fastest configuration recorded for a workload.
Timings are kept per CPU: "cpu" is the measuring machine's `cpu_key()`
(model name and x86-64 ISA level), and a build on another CPU does not
follow them (records without "cpu", from older logs, apply anywhere). Records
measured on an emulated board (`tessera tune --board`) also carry "board"
and "instructions": instruction counts under QEMU are deterministic, so
they rank those records, and their target (a Cortex-M core) keeps them
apart from host timings; they carry no "cpu", as
QEMU's counts are the same on any host.

It lives with the operators, below the tuner, because a build reads it too:
LowerTE hands the log of the build's PassContext (config key "tune.log") to
every kernel's schedule through the ScheduleContext.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TesseraError
from ..util.atomic import atomic_write_text

Config = Mapping[str, int]  # one candidate schedule: knob name -> value, e.g. {"channels": 8, "width": 16}

LOG_CONFIG_KEY = "tune.log"  # PassContext config: a TuningLog or the path of one


@dataclass(frozen=True)
class Workload:
    """One tunable kernel instance: the operator and what its schedule depends on."""

    op: str
    key: str  # canonical JSON of the operator's description (shapes, strides, ...)

    @staticmethod
    def of(op: str, description: object) -> "Workload":
        return Workload(op, json.dumps(description, sort_keys=True, separators=(",", ":")))

    def __str__(self) -> str:
        return f"{self.op}{self.key}"


@dataclass(frozen=True)
class Record:
    workload: Workload
    config: dict[str, int]
    seconds: float
    target: str = ""
    board: str = ""  # the emulated board that counted `instructions` ("" for host timings)
    instructions: int | None = None  # per call of the kernel, counted under QEMU
    cpu: str = ""  # the machine that timed it (`cpu_key()`); "" for board counts and logs that predate it

    @property
    def cost(self) -> float:
        """What ranks the record: instructions where counted, else seconds."""
        return float(self.instructions) if self.instructions is not None else self.seconds

    def to_json(self) -> dict:
        row = {"op": self.workload.op, "key": self.workload.key, "config": self.config,
               "seconds": self.seconds, "target": self.target}
        if self.board:
            row.update(board=self.board, instructions=self.instructions)
        if self.cpu:
            row.update(cpu=self.cpu)
        return row

    def applies_on(self, cpu: str | None) -> bool:
        """Whether a build for `cpu` (None: any) may follow this record: board counts and records
        without a CPU apply anywhere, timings only on the CPU that measured them."""
        return cpu is None or not self.cpu or self.cpu == cpu


@dataclass
class TuningLog:
    records: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._warned_cpus: set[str] = set()  # CPUs a build has been told it ignores other CPUs' records for
        self._by_workload: dict[Workload, list[Record]] = {}
        for r in self.records:
            self._by_workload.setdefault(r.workload, []).append(r)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TuningLog":
        p = Path(path)
        if not p.exists():
            raise TesseraError(f"tuning log {p} does not exist (make one with `tessera tune MODEL -o {p}`)")
        try:
            rows = json.loads(p.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise TesseraError(f"tuning log {p} is malformed (not JSON: {exc}); {_REMAKE}") from None
        if not isinstance(rows, list):
            raise TesseraError(f"tuning log {p} is malformed (got a JSON {type(rows).__name__}, expected a list "
                               f"of records); {_REMAKE}")
        records = []
        for number, row in enumerate(rows, 1):
            try:
                records.append(_record(row))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                reason = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
                raise TesseraError(f"tuning log {p} is malformed (record {number}, {reason}): "
                                   f"{json.dumps(row)[:200]}; expected {_FIELDS}; {_REMAKE}") from None
        return cls(records)

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> "TuningLog | None":
        """The log a build's PassContext config names (LOG_CONFIG_KEY: a TuningLog or a path), if any."""
        source = config.get(LOG_CONFIG_KEY)
        if source is None or isinstance(source, TuningLog):
            return source
        if isinstance(source, (str, os.PathLike)):
            return cls.load(source)
        raise TesseraError(f"PassContext config {LOG_CONFIG_KEY!r}: got {type(source).__name__}, "
                           "expected a TuningLog or the path of one")

    def add(self, record: Record) -> None:
        self.records.append(record)
        self._by_workload.setdefault(record.workload, []).append(record)

    def best(self, workload: Workload, among: Sequence[Config] | None = None,
             target: str | None = None, prefer: Config | None = None, cpu: str | None = None) -> Config | None:
        """The fastest configuration recorded for `workload` (only those in `among`, measured
        for `target`'s kernels and timed on `cpu`, if given; records without a target or a CPU
        match any). On a tie `prefer` (the kernel's default) wins: equal instruction counts are common."""
        found = [r for r in self._by_workload.get(workload, ())
                 if (among is None or r.config in among) and (target is None or r.target in ("", target))
                 and r.applies_on(cpu)]
        # a board's counts rank before host timings of the same target (a log should not hold both)
        preferred = dict(prefer) if prefer is not None else None
        return min(found, key=lambda r: (r.instructions is None, r.cost, r.config != preferred)).config \
            if found else None

    def measured(self, workload: Workload, config: Config, target: str, board: str = "", cpu: str = "") -> bool:
        """Is there a record of this configuration for this workload, target (and board, or CPU)?"""
        return any(r.config == dict(config) and r.target == target and r.board == board and r.cpu == cpu
                   for r in self._by_workload.get(workload, ()))

    def other_cpus(self, cpu: str) -> dict[str, int]:
        """The CPUs other than `cpu` that timed records of this log, with how many each."""
        counts: dict[str, int] = {}
        for r in self.records:
            if not r.applies_on(cpu):
                counts[r.cpu] = counts.get(r.cpu, 0) + 1
        return counts

    def note_warned(self, cpu: str) -> bool:
        """True the first time it is called for `cpu`: builds on it warn once that records of other CPUs
        are ignored, not once per kernel or per build of the same log."""
        first = cpu not in self._warned_cpus
        self._warned_cpus.add(cpu)
        return first

    def save(self, path: str | os.PathLike) -> None:
        rows = sorted((r.to_json() for r in self.records),
                      key=lambda r: (r["op"], r["key"], r.get("instructions") or 0, r["seconds"]))
        atomic_write_text(path, json.dumps(rows, indent=1, sort_keys=True) + "\n")  # Ctrl-C keeps the old log


_FIELDS = '{"op", "key", "config", "seconds", "target", "cpu"} records'
_REMAKE = "delete it, or make it again with `tessera tune MODEL -o LOG`"


def _record(row: Any) -> Record:  # JSON: anything, checked here
    """One record of a log file (raises KeyError, TypeError or ValueError on a malformed one)."""
    config = row["config"]
    if not isinstance(config, Mapping):
        raise TypeError(f"'config' is a {type(config).__name__}, expected an object of knob values")
    instructions = row.get("instructions")
    return Record(Workload(str(row["op"]), str(row["key"])), {str(k): int(v) for k, v in config.items()},
                  float(row["seconds"]), str(row.get("target", "")), str(row.get("board", "")),
                  None if instructions is None else int(instructions),
                  str(row.get("cpu", "")))
