"""The schedule context: what an operator's TE compute is told about the kernel it builds.

A schedule's best parameters depend on the machine (a convolution's register
tile follows the target's vector width) and may have been measured by
`tessera tune`. Rather than read either from global state, every compute is
called as `compute(inputs, attrs, out_type, sched)` and asks `sched`.
LowerTE builds one context per target it lowers kernels for; the tuner
builds its own, with configurations forced or a collector attached.

`sched.choose(op, description, candidates, default)` names a tunable
workload (the operator plus a JSON-able description: shapes, strides, ...)
and the candidate configurations the kernel can generate (small dicts such
as {"channels": 8, "width": 16}). The answer comes, in this order, from

1. `forced`: a configuration the tuner forces while it measures candidates,
2. `log`: the fastest configuration the tuning log holds for the workload,
   among today's candidates, measured for this target and timed on this
   CPU (`cpu`: model name and ISA level; a build warns once per log that it
   ignores records timed on other CPUs),
3. the operator's default.

Every call is also reported to `collector`, so the tuner learns a model's
tunable workloads by lowering it once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ..target.cpu_id import cpu_key
from ..target.target import Target
from .tuning_log import Config, TuningLog, Workload


@dataclass(frozen=True)
class Choice:
    """What `choose` was asked: reported to the context's collector."""

    workload: Workload
    candidates: tuple[Mapping[str, int], ...]
    default: Mapping[str, int]
    work: int = 0
    """The kernel's multiply-adds (or another measure of its cost; 0: unknown): a tuner with a time
    budget measures the costliest workloads first."""


Collector = Callable[[Choice], None]


@dataclass(frozen=True)
class ScheduleContext:
    """How the kernels of one target are scheduled (see the module doc)."""

    target: Target
    """The target the kernel is built for: schedule defaults follow it (e.g. its vector width)."""
    log: TuningLog | None = None
    """Measured configurations to follow, or None for defaults only."""
    forced: Mapping[Workload, Config] = field(default_factory=dict)
    """Configurations the tuner imposes (they win over the log); copied, read-only."""
    collector: Collector | None = None
    """Called with every Choice a kernel asks for (the tuner's way of finding workloads)."""
    cpu: str = field(default_factory=cpu_key)
    """The CPU the kernels will run on (`cpu_key()`, this machine's by default): only the log's
    timings made on it are followed."""

    def __post_init__(self) -> None:
        frozen = {w: MappingProxyType(dict(c)) for w, c in self.forced.items()}
        object.__setattr__(self, "forced", MappingProxyType(frozen))

    @classmethod
    def for_build(cls, target: Target, config: Mapping[str, object],
                  forced: Mapping[Workload, Config] | None = None) -> "ScheduleContext":
        """The context of a build for `target`, with the tuning log its PassContext config names."""
        log = TuningLog.from_config(config)
        sched = cls(target, log, forced or {})
        if log is not None:
            _warn_of_other_cpus(log, sched.cpu)
        return sched

    def choose(self, op: str, description: object, candidates: Sequence[Config],
               default: Config, work: int = 0) -> dict[str, int]:
        """The configuration to use for this workload: forced, else logged, else `default`.
        `work`: the kernel's multiply-adds, which orders a time-budgeted tuner's work (see Choice)."""
        workload = Workload.of(op, description)
        options = tuple(dict(c) for c in candidates)
        if self.collector is not None:
            self.collector(Choice(workload, options, dict(default), work))
        if workload in self.forced:
            return dict(self.forced[workload])
        if self.log is not None:
            # entries a newer compiler no longer offers are ignored, and so are timings
            # measured for other targets' kernels (another -march, a Cortex-M core) or on other CPUs
            logged = self.log.best(workload, among=options, target=str(self.target), prefer=default, cpu=self.cpu)
            if logged is not None:
                return dict(logged)
        return dict(default)


class OtherCpuWarning(UserWarning):
    """A tuning log holds timings made on another CPU, which a build here does not follow."""


def _warn_of_other_cpus(log: TuningLog, cpu: str) -> None:
    """Say once per log and CPU that its records timed elsewhere are ignored (the build is correct, only untuned)."""
    others = log.other_cpus(cpu)
    if not others or not log.note_warned(cpu):
        return
    listed = ", ".join(f"{n} on {other}" for other, n in sorted(others.items()))
    warnings.warn(f"tuning log: {sum(others.values())} of its {len(log.records)} measurements were made on "
                  f"another CPU ({listed}) and are not used on this one ({cpu}); run `tessera tune` on this "
                  "machine to tune for it", OtherCpuWarning, stacklevel=3)
