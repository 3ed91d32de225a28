"""Latency of tessera against onnxruntime, in the same run.

Each light model of the ONNX suite gets seeded random weights (the stored
ones are constant-filled) and runs single-threaded on the same input in
three ways: tessera's own generated C (target `c`), tessera with OpenBLAS
for convolutions and matrix products (target `blas`), and onnxruntime. The
runs alternate and the median of several is compared. Also prints the
Python-side compile time of ResNet-50 (gcc excluded).

    python benchmarks/latency.py                 # all nine light models
    python benchmarks/latency.py resnet50 vgg19  # a subset
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import tessera  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402
from tessera.testing.models import LIGHT_MODELS, data_input, light_path, ort_session, seeded_input  # noqa: E402
from tessera.testing.weights import randomize_weights  # noqa: E402


def median_seconds(fn, repeat: int, budget: float) -> float:
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget and len(times) >= 3:
            break
    return statistics.median(times)


TARGETS = ("c", "blas")


def bench_model(name: str, repeat: int, budget: float) -> dict:
    model = randomize_weights(onnx.load(light_path(name)), seed=0)
    input_name, shape = data_input(model)
    x = seeded_input(shape, seed=1)
    mod, params = from_onnx(model)
    sess = ort_session(model, threads=1)
    ref = sess.run(None, {input_name: x})[0]
    modules, errors = {}, {}
    for target in TARGETS:
        lib = tessera.build(mod, target=target, params=params)
        modules[target] = tessera.GraphModule(lib)
        modules[target].set_input(0, x)
        modules[target].run()
        errors[target] = float(np.max(np.abs(modules[target].get_output(0) - ref)))
    runners = {t: modules[t].run for t in TARGETS}
    runners["ort"] = lambda: sess.run(None, {input_name: x})
    # interleave the runtimes so machine noise hits all of them alike
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(2):
        for key, fn in runners.items():
            times[key].append(median_seconds(fn, repeat, budget / 6))
    result = {k: min(v) for k, v in times.items()}
    result.update(name=name, err=max(errors.values()))
    return result


def resnet50_compile_time() -> float:
    model = onnx.load(light_path("resnet50"))
    t0 = time.perf_counter()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    return (time.perf_counter() - t0) - lib.compile_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(LIGHT_MODELS)} (default all)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per model and runtime, at most")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(LIGHT_MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(LIGHT_MODELS)}")
    args.models = args.models or list(LIGHT_MODELS)
    rows = []
    print(f"{'model':14s} {'c ms':>9s} {'blas ms':>9s} {'ort ms':>9s} {'c/ort':>7s} {'blas/ort':>9s} {'max |diff|':>11s}")
    for name in args.models:
        r = bench_model(name, args.repeat, args.budget)
        rows.append(r)
        print(f"{name:14s} {r['c'] * 1e3:9.2f} {r['blas'] * 1e3:9.2f} {r['ort'] * 1e3:9.2f} "
              f"{r['c'] / r['ort']:7.2f} {r['blas'] / r['ort']:9.2f} {r['err']:11.2e}", flush=True)
    for target in TARGETS:
        geo = math.exp(sum(math.log(r[target] / r["ort"]) for r in rows) / len(rows))
        print(f"geometric mean tessera {target}/onnxruntime: {geo:.2f} (1 thread each)")
    print(f"ResNet-50 compile time, Python side (gcc excluded): {resnet50_compile_time():.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
