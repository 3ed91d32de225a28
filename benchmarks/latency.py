"""Latency of tessera's generated C against onnxruntime, in the same run.

Each light model of the ONNX suite gets seeded random weights (the stored
ones are constant-filled); both runtimes run it single-threaded on the same
input, alternating, and the median of several runs is compared. Also prints
the Python-side compile time of ResNet-50 (gcc excluded).

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


def bench_model(name: str, repeat: int, budget: float) -> dict:
    model = randomize_weights(onnx.load(light_path(name)), seed=0)
    input_name, shape = data_input(model)
    x = seeded_input(shape, seed=1)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    gm = tessera.GraphModule(lib)
    gm.set_input(0, x)
    sess = ort_session(model, threads=1)
    ours = lib(x)[0]
    ref = sess.run(None, {input_name: x})[0]
    err = float(np.max(np.abs(ours - ref)))
    # interleave the two so machine noise hits both alike
    t_ts, t_ort = [], []
    for _ in range(2):
        t_ts.append(median_seconds(gm.run, repeat, budget / 4))
        t_ort.append(median_seconds(lambda: sess.run(None, {input_name: x}), repeat, budget / 4))
    return {"name": name, "tessera": min(t_ts), "ort": min(t_ort), "err": err,
            "python_s": lib.python_seconds, "gcc_s": lib.compile_seconds}


def resnet50_compile_time() -> float:
    model = onnx.load(light_path("resnet50"))
    t0 = time.perf_counter()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    return (time.perf_counter() - t0) - lib.compile_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=list(LIGHT_MODELS), choices=[*LIGHT_MODELS, []])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per model and runtime, at most")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'model':14s} {'tessera ms':>11s} {'onnxruntime ms':>15s} {'ratio':>7s} {'max |diff|':>11s}")
    for name in args.models:
        r = bench_model(name, args.repeat, args.budget)
        rows.append(r)
        print(f"{name:14s} {r['tessera'] * 1e3:11.2f} {r['ort'] * 1e3:15.2f} "
              f"{r['tessera'] / r['ort']:7.2f} {r['err']:11.2e}", flush=True)
    geo = math.exp(sum(math.log(r["tessera"] / r["ort"]) for r in rows) / len(rows))
    print(f"geometric mean tessera/onnxruntime: {geo:.2f} (1 thread each)")
    print(f"ResNet-50 compile time, Python side (gcc excluded): {resnet50_compile_time():.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
