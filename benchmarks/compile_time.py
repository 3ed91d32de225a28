"""Cold and warm compile time of ResNet-50 and DenseNet-121 (the onnx wheel's light models).

Each build runs in a fresh Python process (imports are not counted), so no
in-process state carries over between builds:

* cold: an empty kernel cache (a new TESSERA_CACHE_DIR), so gcc compiles
  every translation unit;
* warm: the same model again on the cache the cold build filled.

Columns: wall seconds of the whole build (import of the ONNX model to the
loaded library), the Python side (`lib.python_seconds`: optimisation,
lowering, memory planning, C generation), the C compiler's wall seconds
(`lib.compile_seconds`: compiling, linking, loading) and CPU seconds (user +
system of all compiler processes, a figure the other load on a shared
machine disturbs less than wall time), CPU seconds of the whole build
(Python and compiler), translation units and kernels. With
`--repeat N` every build runs N times and the smallest wall time counts.

    python benchmarks/compile_time.py                        # resnet50 and densenet121, target c
    python benchmarks/compile_time.py densenet121 --repeat 3
    python benchmarks/compile_time.py --target "c -mcpu=x86-64-v3"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MODELS = ("resnet50", "densenet121")
GOALS = {"resnet50": 4.0, "densenet121": 6.0}  # issue 16: cold build, gcc included, 2 cores


@dataclass(frozen=True)
class Timing:
    """One build, as the child process measured it."""

    wall: float
    python: float
    compiler: float
    compiler_cpu: float
    cpu: float  # this process and the compiler
    units: int
    kernels: int


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build_once(model_name: str, target: str) -> Timing:
    """Build `model_name` in this process (the child's job) and time it."""
    import onnx

    import tessera
    from tessera.frontend import from_onnx
    from tessera.testing.models import light_path

    model = onnx.load(light_path(model_name))
    cpu0, own0 = _children_cpu(), _own_cpu()
    t0 = time.perf_counter()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    wall = time.perf_counter() - t0
    assert lib.module is not None
    generated = [f for f in lib.module.functions_by_unit().values() if f]
    compiler_cpu = _children_cpu() - cpu0
    return Timing(wall, lib.python_seconds, lib.compile_seconds, compiler_cpu, compiler_cpu + _own_cpu() - own0,
                  len(lib.module.units()), sum(len(f) for f in generated))


def run_child(model_name: str, target: str, cache: Path) -> Timing:
    env = {**os.environ, "TESSERA_CACHE_DIR": str(cache)}
    cmd = [sys.executable, __file__, "--child", model_name, "--target", target]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return Timing(**json.loads(out.strip().splitlines()[-1]))


def measure(model_name: str, target: str, repeat: int) -> dict[str, Timing]:
    """The fastest of `repeat` cold builds, each on its own empty cache, then warm builds on the last one."""
    cold: list[Timing] = []
    warm: list[Timing] = []
    with tempfile.TemporaryDirectory(prefix="tessera-compile-time-") as tmp:
        for k in range(repeat):
            cache = Path(tmp) / f"cache{k}"
            cold.append(run_child(model_name, target, cache))
        for _ in range(repeat):
            warm.append(run_child(model_name, target, cache))
    return {"cold": min(cold, key=lambda t: t.wall), "warm": min(warm, key=lambda t: t.wall)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)} (default both)")
    parser.add_argument("--target", default="c", help="target to build for (default c)")
    parser.add_argument("--repeat", type=int, default=1, help="builds per row; the fastest counts (default 1)")
    parser.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)  # one timed build, JSON on stdout
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(build_once(args.child, args.target).__dict__))
        return 0
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    if args.repeat < 1:
        parser.error(f"--repeat must be positive, got {args.repeat}")
    from tessera.target.cpu_id import native_cpu_model  # (the builds themselves run in fresh processes)

    cpu = native_cpu_model() or platform.machine()
    print(f"CPU: {cpu}, {os.cpu_count()} cores; target {args.target!r}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'model':12s} {'cache':5s} {'total s':>8s} {'python s':>9s} {'gcc s':>7s} {'gcc cpu s':>10s} "
          f"{'cpu s':>6s} {'units':>6s} {'kernels':>8s} {'goal s':>7s}")
    for name in args.models or MODELS:
        for kind, t in measure(name, args.target, args.repeat).items():
            goal = f"{GOALS[name]:7.1f}" if kind == "cold" else f"{'':7s}"
            print(f"{name:12s} {kind:5s} {t.wall:8.2f} {t.python:9.2f} {t.compiler:7.2f} {t.compiler_cpu:10.2f} "
                  f"{t.cpu:6.2f} {t.units:6d} {t.kernels:8d} {goal}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
