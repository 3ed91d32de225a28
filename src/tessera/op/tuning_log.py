"""The tuning log: measured schedule configurations per workload, as JSON on disk.

The file is a list of records {"op", "key", "config", "seconds", "target"};
`best` answers the fastest configuration recorded for a workload. Records
measured on an emulated board (`tessera tune --board`) also carry "board"
and "instructions": instruction counts under QEMU are deterministic, so
they rank those records, and their target (a Cortex-M core) keeps them
apart from host timings. Logs are
machine-specific: a log tuned on one CPU still builds correct code on
another, only perhaps slower code.

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

    @property
    def cost(self) -> float:
        """What ranks the record: instructions where counted, else seconds."""
        return float(self.instructions) if self.instructions is not None else self.seconds

    def to_json(self) -> dict:
        row = {"op": self.workload.op, "key": self.workload.key, "config": self.config,
               "seconds": self.seconds, "target": self.target}
        if self.board:
            row.update(board=self.board, instructions=self.instructions)
        return row


@dataclass
class TuningLog:
    records: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
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
            records = [Record(Workload(r["op"], r["key"]), {k: int(v) for k, v in r["config"].items()},
                              float(r["seconds"]), str(r.get("target", "")), str(r.get("board", "")),
                              None if r.get("instructions") is None else int(r["instructions"])) for r in rows]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TesseraError(f"tuning log {p} is malformed ({exc}); expected a JSON list of "
                               '{"op", "key", "config", "seconds"} records') from None
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
             target: str | None = None, prefer: Config | None = None) -> Config | None:
        """The fastest configuration recorded for `workload` (only those in `among`, and
        measured for `target`'s kernels, if given; records without a target match any).
        On a tie `prefer` (the kernel's default) wins: equal instruction counts are common."""
        found = [r for r in self._by_workload.get(workload, ())
                 if (among is None or r.config in among) and (target is None or r.target in ("", target))]
        # a board's counts rank before host timings of the same target (a log should not hold both)
        preferred = dict(prefer) if prefer is not None else None
        return min(found, key=lambda r: (r.instructions is None, r.cost, r.config != preferred)).config \
            if found else None

    def measured(self, workload: Workload, config: Config, target: str, board: str = "") -> bool:
        """Is there a record of this configuration for this workload, target (and board)?"""
        return any(r.config == dict(config) and r.target == target and r.board == board
                   for r in self._by_workload.get(workload, ()))

    def save(self, path: str | os.PathLike) -> None:
        rows = sorted((r.to_json() for r in self.records),
                      key=lambda r: (r["op"], r["key"], r.get("instructions") or 0, r["seconds"]))
        atomic_write_text(path, json.dumps(rows, indent=1, sort_keys=True) + "\n")  # Ctrl-C keeps the old log
