"""The tuning log: measured configurations per workload, as JSON on disk.

The file is a list of records {"op", "key", "config", "seconds", "target"};
`best` answers the fastest configuration recorded for a workload. Logs are
machine-specific: a log tuned on one CPU still builds correct code on
another, only perhaps slower code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TesseraError
from ..util.atomic import atomic_write_text
from .knobs import Config, Workload


@dataclass(frozen=True)
class Record:
    workload: Workload
    config: dict[str, int]
    seconds: float
    target: str = ""

    def to_json(self) -> dict:
        return {"op": self.workload.op, "key": self.workload.key, "config": self.config,
                "seconds": self.seconds, "target": self.target}


@dataclass
class TuningLog:
    records: list[Record] = field(default_factory=list)

    _cache = {}  # path -> (mtime, TuningLog)

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
                              float(r["seconds"]), str(r.get("target", ""))) for r in rows]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TesseraError(f"tuning log {p} is malformed ({exc}); expected a JSON list of "
                               '{"op", "key", "config", "seconds"} records') from None
        return cls(records)

    @classmethod
    def cached(cls, path: str | os.PathLike) -> "TuningLog":
        p = Path(path)
        mtime = p.stat().st_mtime_ns if p.exists() else None
        hit = cls._cache.get(str(p))
        if hit is None or hit[0] != mtime:
            hit = (mtime, cls.load(p))
            cls._cache[str(p)] = hit
        return hit[1]

    def add(self, record: Record) -> None:
        self.records.append(record)
        self._by_workload.setdefault(record.workload, []).append(record)

    def best(self, workload: Workload, among: Sequence[Config] | None = None,
             target: str | None = None) -> Config | None:
        """The fastest configuration recorded for `workload` (only those in `among`, and
        measured for `target`'s kernels, if given; records without a target match any)."""
        found = [r for r in self._by_workload.get(workload, ())
                 if (among is None or r.config in among) and (target is None or r.target in ("", target))]
        return min(found, key=lambda r: r.seconds).config if found else None

    def measured(self, workload: Workload, config: Config, target: str) -> bool:
        """Is there a record of this configuration for this workload and target?"""
        return any(r.config == dict(config) and r.target == target for r in self._by_workload.get(workload, ()))

    def save(self, path: str | os.PathLike) -> None:
        rows = sorted((r.to_json() for r in self.records), key=lambda r: (r["op"], r["key"], r["seconds"]))
        atomic_write_text(path, json.dumps(rows, indent=1, sort_keys=True) + "\n")  # Ctrl-C keeps the old log
