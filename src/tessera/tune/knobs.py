"""Schedule knobs: where a kernel's compute asks which schedule parameters to use.

An operator's TE compute describes its workload (operator name plus a
JSON-able key: shapes, strides, ...) and the candidate configurations it
can generate (small dicts such as {"channels": 8, "width": 16}), and calls
`choose`. The answer comes, in this order, from

1. a configuration the tuner forces while it measures candidates,
2. the tuning log of the current PassContext (config key "tune.log": a
   path or a TuningLog), when it holds an entry for the workload,
3. the operator's own default.

Every `choose` call is also reported to the active `collect()` blocks, so the
tuner learns a model's tunable workloads by lowering it once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

Config = Mapping[str, int]

LOG_CONFIG_KEY = "tune.log"


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
class Choice:
    """What `choose` was asked: reported to `collect()` blocks."""

    workload: Workload
    candidates: tuple[Mapping[str, int], ...]
    default: Mapping[str, int]


_forced: list[dict[Workload, Config]] = []
_targets: list[object] = []  # the Target whose kernels are being lowered, innermost last
_collectors: list[dict[Workload, Choice]] = []


@contextlib.contextmanager
def forced(configs: Mapping[Workload, Config]) -> Iterator[None]:
    """Within the block, `choose` answers these configurations for these workloads."""
    _forced.append(dict(configs))
    try:
        yield
    finally:
        _forced.pop()


@contextlib.contextmanager
def collect() -> Iterator[dict[Workload, Choice]]:
    """Within the block, every `choose` call is recorded (workload -> Choice)."""
    seen: dict[Workload, Choice] = {}
    _collectors.append(seen)
    try:
        yield seen
    finally:
        _collectors.remove(seen)


@contextlib.contextmanager
def lowering_for(target: object) -> Iterator[None]:
    """Within the block, kernels are lowered for `target` (schedule defaults may depend on it)."""
    _targets.append(target)
    try:
        yield
    finally:
        _targets.pop()


def current_target() -> object | None:
    """The Target kernels are being lowered for, or None outside a build."""
    return _targets[-1] if _targets else None


def _logged(workload: Workload, candidates: Sequence[Config]) -> Config | None:
    from ..transform.pass_infra import PassContext
    from .log import TuningLog

    source = PassContext.current().config.get(LOG_CONFIG_KEY)
    if source is None:
        return None
    log = source if isinstance(source, TuningLog) else TuningLog.cached(source)
    # entries a newer compiler no longer offers are ignored, and so are timings
    # measured for other targets' kernels (another -march, a Cortex-M core)
    target = current_target()
    return log.best(workload, among=candidates, target=None if target is None else str(target))


def choose(op: str, description: object, candidates: Sequence[Config], default: Config) -> dict[str, int]:
    """The configuration to use for this workload (see the module doc)."""
    workload = Workload.of(op, description)
    options = tuple(dict(c) for c in candidates)
    for seen in _collectors:
        seen.setdefault(workload, Choice(workload, options, dict(default)))
    for table in reversed(_forced):
        if workload in table:
            return dict(table[workload])
    logged = _logged(workload, options)
    if logged is not None:
        return dict(logged)
    return dict(default)
