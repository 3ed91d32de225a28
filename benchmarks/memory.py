"""Static memory planning: planned pool bytes against two lower bounds.

For each of the nine ONNX light models and the four MLPerf Tiny models,
builds the AOT program (host target; the plan does not depend on the CPU)
and prints:

* pool: the planned pool (intermediate tensors and kernel scratch);
* LB exec: the lower bound for the order actually executed — the largest
  total of buffers alive at one step (tensors sharing a buffer in place
  count once), which no placement can beat;
* LB file: the bound of the naive schedule: kernels in the ONNX file's own
  order (the graph's depth-first order, in which the importer read the
  nodes), every tensor and scratch buffer alive for whole steps, no sharing
  in place;
* LB file*: the file's order under the same liveness rules as the executed
  order (so LB exec < LB file* would be the operator order's own gain);
* the ratios pool / LB exec and pool / LB file, and the order and planner
  that won.

    python benchmarks/memory.py                 # all 13 models
    python benchmarks/memory.py --models squeezenet inception_v1

Exits non-zero unless pool <= 1.05 x LB exec and pool <= LB file on every
model, and pool < LB file on at least three models.
"""

from __future__ import annotations

import argparse
import sys
import time

import onnx

import tessera
from tessera.frontend import from_onnx
from tessera.testing import mlperf_tiny
from tessera.testing.models import LIGHT_MODELS, light_path

MODELS = [*LIGHT_MODELS, *mlperf_tiny.MODELS]


def load(name: str) -> onnx.ModelProto:
    return onnx.load(light_path(name) if name in LIGHT_MODELS else mlperf_tiny.model_path(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=MODELS, help=f"any of {', '.join(MODELS)} (default all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown {unknown}; choose from {', '.join(MODELS)}")
    print(f"{'model':16s} {'pool B':>10s} {'LB exec B':>10s} {'LB file B':>10s} {'pool/exec':>9s} "
          f"{'pool/file':>9s} {'LB file* B':>10s} {'in-place':>8s} {'order':>12s} {'planner':>20s} {'s':>5s}")
    ok = True
    below = 0
    for name in args.models:
        t0 = time.perf_counter()
        mod, params = from_onnx(load(name))
        lib = tessera.build(mod, params=params, executor="aot", mod_name=name)
        memory = lib.program.planned
        pool, exec_lb, file_lb = memory.total, memory.lower_bound, memory.file_order_bound
        same = memory.file_order_same_rules
        ok &= pool <= 1.05 * exec_lb and pool <= file_lb
        below += pool < file_lb
        planner = "+".join(p.plan.algorithm for p in memory.pools)
        print(f"{name:16s} {pool:10d} {exec_lb:10d} {file_lb:10d} {pool / max(exec_lb, 1):9.3f} "
              f"{pool / max(file_lb, 1):9.3f} {same:10d} {memory.inplace:8d} {lib.program.order_strategy:>12s} "
              f"{planner:>20s} {time.perf_counter() - t0:5.1f}", flush=True)
    print(f"\npool <= 1.05 x LB exec and pool <= LB file on every model: {'yes' if ok else 'NO'}; "
          f"pool < LB file on {below} models")
    return 0 if ok and below >= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
