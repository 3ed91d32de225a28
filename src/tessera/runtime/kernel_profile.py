"""The graph executor's per-kernel times as a table and as a Chrome trace.

    profile = profile_kernels(GraphModule(lib), repeat=10)
    print(profile.table(top=10))          # the slowest kernels, their share of the run, their operators
    Path("trace.json").write_text(json.dumps(profile.chrome_trace()))   # chrome://tracing, ui.perfetto.dev

`GraphModule.profile` times each kernel call on its own (the median of
`repeat` calls); the trace lays those medians end to end in execution order,
so it shows where a run's time goes, not one particular run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .graph_executor import GraphModule

DEFAULT_TOP = 10


@dataclass(frozen=True)
class KernelTime:
    step: int  # position in execution order
    kernel: str
    seconds: float  # median of the timed calls
    operators: tuple[str, ...]  # what the kernel computes (fused operators); empty when the graph does not say


@dataclass(frozen=True)
class KernelProfile:
    kernels: tuple[KernelTime, ...]  # in execution order
    repeat: int  # calls timed per kernel

    @property
    def total(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def slowest(self, top: int = DEFAULT_TOP) -> list[KernelTime]:
        """The `top` slowest kernels, slowest first (ties: execution order)."""
        return sorted(self.kernels, key=lambda k: (-k.seconds, k.step))[:top]

    def table(self, top: int = DEFAULT_TOP) -> str:
        total = self.total
        rows = self.slowest(top)
        width = max([len(k.kernel) for k in rows] + [6])
        lines = [f"profile: {len(self.kernels)} kernels, {duration(total)} in all "
                 f"(each kernel's median of {self.repeat} calls); the {len(rows)} slowest:",
                 f"  {'step':>4}  {'time':>10}  {'share':>6}  {'kernel':<{width}}  operators"]
        for k in rows:
            share = k.seconds / total if total > 0 else 0.0
            ops = ", ".join(k.operators) or "-"
            lines.append(f"  {k.step:>4}  {duration(k.seconds):>10}  {share:>6.1%}  {k.kernel:<{width}}  {ops}")
        rest = len(self.kernels) - len(rows)
        if rest > 0:
            other = total - sum(k.seconds for k in rows)
            lines.append(f"  ({rest} other kernels: {duration(other)}, {other / total if total > 0 else 0.0:.1%})")
        return "\n".join(lines)

    def chrome_trace(self, name: str = "tessera") -> dict[str, object]:
        """Trace Event Format: one complete ("X") event per kernel, medians laid end to end, in microseconds."""
        events: list[dict[str, object]] = [
            {"name": "process_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": name}},
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "graph executor"}},
        ]
        start = 0.0
        for k in self.kernels:
            events.append({"name": k.kernel, "cat": "kernel", "ph": "X", "pid": 1, "tid": 1,
                           "ts": round(start * 1e6, 3), "dur": round(k.seconds * 1e6, 3),
                           "args": {"step": k.step, "operators": list(k.operators)}})
            start += k.seconds
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"source": "tessera run --profile", "median_of_calls": self.repeat}}


def duration(seconds: float) -> str:
    """Seconds in us below a millisecond, else in ms."""
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.3f} ms"


def profile_kernels(module: GraphModule, repeat: int = 3) -> KernelProfile:
    """Time every kernel of `module` on its current inputs (set them first); not thread-safe."""
    times = module.profile(repeat)
    operators = module.kernel_operators()
    return KernelProfile(tuple(KernelTime(k, name, seconds, operators[k] if k < len(operators) else ())
                               for k, (name, seconds) in enumerate(times)), repeat)


__all__: Sequence[str] = ("KernelProfile", "KernelTime", "duration", "profile_kernels")
