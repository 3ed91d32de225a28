"""Latency of tessera against onnxruntime, at 1 and 2 threads, in the same run.

Models: the nine light models of the ONNX suite with seeded random weights
(the stored ones are constant-filled), the four MLPerf Tiny float models
(`tessera.testing.mlperf_tiny`, random weights), four blocks whose
convolutions and matrix products end in Clip, HardSwish, SiLU and GELU tails
(`tessera.testing.tail_blocks`), a DeepLabV3-style ASPP head with dilated
3x3 convolutions (`tessera.testing.aspp`), two matmul-bound transformer
encoder layers (`encoder_block.py`: ViT-B/16 at 197 tokens, BERT-base at
128) and a ConvNeXt-T block (7x7 depthwise, LayerNorm over channels, GELU
MLP, layer scale; `tessera.testing.convnext`). For each model and thread
count, tessera's own generated C (target `c`, `GraphModule(lib,
num_threads=N)`) and onnxruntime (`intra_op_num_threads=N`) run on the same
input; the runs alternate, in 2 to 8 rounds (as many as fit the model's
budget), and the smallest median counts. (At N > 1
threads a GraphModule runs at N or at one, whichever its recent runs found
faster: runtime/thread_choice.py. Each module first runs until it has timed
both counts, so the medians time its steady state, not its first tries at
one thread.) Optional
columns: the same `c` build with a tuning log (`--tuning-log`, from `tessera
tune`; `--tune` makes or extends it first) and the `blas` target (`--blas`;
OpenBLAS itself runs on one thread unless OPENBLAS_NUM_THREADS is set). Prints the CPU and the
x86-64 ISA level of this machine and of `--target`, each model's tessera/onnxruntime ratios, then
per column and thread count the geometric mean and worst model of each family (`FAMILIES`) and of
all, and the Python-side compile time of ResNet-50 (gcc excluded).

    python benchmarks/latency.py                                 # all 21 models, 1 and 2 threads
    python benchmarks/latency.py resnet50 kws_ds_cnn --threads 1 # a subset
    python benchmarks/latency.py --tuning-log tune.json --tune   # tune, then untuned and tuned columns
    python benchmarks/latency.py --target "c -mcpu=x86-64-v3"    # the AVX2 code path on any newer CPU
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import tessera  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402
from tessera.runtime import thread_choice  # noqa: E402
from tessera.target import Target  # noqa: E402
from tessera.target.cpu_id import isa_level, native_cpu_model  # noqa: E402
from tessera.target.simd import float32_lanes, host_arch, native_cpu_flags  # noqa: E402
from tessera.testing import convnext, mlperf_tiny, tail_blocks  # noqa: E402
from tessera.testing.aspp import ASPP_NAME, INPUT_SHAPE, aspp_head  # noqa: E402
from tessera.testing.models import LIGHT_MODELS, data_input, light_path, ort_session, seeded_input  # noqa: E402
from tessera.testing.weights import randomize_weights  # noqa: E402
from tessera.transform import PassContext  # noqa: E402
from tessera.tune import LOG_CONFIG_KEY, TuningLog, tune  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import encoder_block  # noqa: E402

# the model families the summary reports apart (geometric mean and worst model of each)
FAMILIES: dict[str, tuple[str, ...]] = {
    "zoo CNNs": LIGHT_MODELS,
    "mlperf tiny": tuple(mlperf_tiny.MODELS),
    "inverted residual": ("mobilenet_v2_block", "mobilenet_v3_block", "efficientnet_block"),
    "dilated ASPP": (ASPP_NAME,),
    "transformer": (*encoder_block.BLOCKS, "gpt2_mlp"),
    "convnext": (convnext.CONVNEXT_NAME,),
}
MODELS = (*LIGHT_MODELS, *mlperf_tiny.MODELS, *tail_blocks.BLOCKS, ASPP_NAME, *encoder_block.BLOCKS,
          convnext.CONVNEXT_NAME)
ROUNDS = 2  # alternating rounds per runner, at least; the smallest median counts
# ... and more, up to this many, while another round fits in the model's budget: a slow stretch of the
# machine then spoils a few blocks of a small model, not its figure (kws_ds_cnn, 0.08 ms a run, once
# read 1.56 as `c` and 1.16 as `blas` in one run, the same C)
MAX_ROUNDS = 8
# seconds between two runners' blocks: the pool threads of the one before stop spinning (onnxruntime's
# spin a while after a run)
SETTLE = 0.05
SETTLE_RUNS = thread_choice.WARM_UP + thread_choice.BURST + 2  # enough for `settle_threads`, with a run to spare
NAME_WIDTH = max(map(len, MODELS))  # of the model column


@dataclass(frozen=True)
class Variant:
    """One tessera column: a target, with or without a tuning log."""

    name: str
    target: str
    log: TuningLog | None = None


@dataclass
class Row:
    model: str
    threads: int
    seconds: dict[str, float] = field(default_factory=dict)  # variant name or "ort" -> seconds
    error: float = 0.0  # largest |tessera - onnxruntime| over the variants


def load_model(name: str) -> tuple[onnx.ModelProto, str, np.ndarray]:
    if name == ASPP_NAME:
        return aspp_head(), "x", seeded_input(INPUT_SHAPE, seed=1)
    if name == convnext.CONVNEXT_NAME:
        return convnext.convnext_block(), "x", seeded_input(convnext.INPUT_SHAPE, seed=1)
    if name in encoder_block.BLOCKS:
        return encoder_block.build(name), "x", encoder_block.sample_input(name)
    if name in mlperf_tiny.MODELS:
        model = onnx.load(mlperf_tiny.model_path(name))
        input_name, _ = data_input(model)
        return model, input_name, mlperf_tiny.sample_input(name)
    if name in tail_blocks.BLOCKS:
        model = tail_blocks.BLOCKS[name]()
        input_name, shape = data_input(model)
        return model, input_name, seeded_input(shape, seed=1)
    model = randomize_weights(onnx.load(light_path(name)), seed=0)
    input_name, shape = data_input(model)
    return model, input_name, seeded_input(shape, seed=1)


def median_seconds(fn: Callable[[], object], repeat: int, budget: float) -> float:
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


def settle_threads(gm: tessera.GraphModule) -> None:
    """Runs `gm` until its thread choice has timed both counts (runtime/thread_choice.py). Its first tries at
    one thread come right after its first runs: in a block of a few runs of a slow model (VGG-19 at two
    threads: 4-6 runs in the budget) they were most of the block and set its median."""
    for _ in range(SETTLE_RUNS):
        if gm.threads_settled:
            return
        gm.run()


def bench_model(name: str, variants: list[Variant], threads: list[int], repeat: int, budget: float) -> list[Row]:
    model, input_name, x = load_model(name)
    mod, params = from_onnx(model)
    libs = {}
    for v in variants:
        with PassContext(config={LOG_CONFIG_KEY: v.log} if v.log is not None else {}):
            libs[v.name] = tessera.build(mod, target=v.target, params=params)
    rows = []
    share = budget / (len(threads) * (len(variants) + 1) * ROUNDS)
    for n in threads:
        sess = ort_session(model, threads=n)
        ref = sess.run(None, {input_name: x})[0]
        row = Row(name, n)
        runners: dict[str, Callable[[], object]] = {}
        for v in variants:
            gm = tessera.GraphModule(libs[v.name], num_threads=n)
            gm.set_input(0, x)
            gm.run()
            row.error = max(row.error, float(np.max(np.abs(gm.get_output(0) - ref))))
            settle_threads(gm)
            runners[v.name] = gm.run
        runners["ort"] = lambda: sess.run(None, {input_name: x})
        # interleave the runtimes so machine noise hits all of them alike
        times: dict[str, list[float]] = {k: [] for k in runners}
        start, rounds = time.perf_counter(), 0
        while rounds < MAX_ROUNDS:
            spent = time.perf_counter() - start
            if rounds >= ROUNDS and spent + spent / rounds > budget / len(threads):
                break  # another round as long as the average one would overrun the budget
            for key, fn in runners.items():
                time.sleep(SETTLE)
                times[key].append(median_seconds(fn, repeat, share))
            rounds += 1
        row.seconds = {k: min(v) for k, v in times.items()}
        rows.append(row)
    return rows


def resnet50_compile_time() -> float:
    model = onnx.load(light_path("resnet50"))
    t0 = time.perf_counter()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params)
    return (time.perf_counter() - t0) - lib.compile_seconds


def tune_models(models: list[str], path: str, budget: float, target: str) -> None:
    for name in models:
        model, _, _ = load_model(name)
        mod, params = from_onnx(model)
        tuned = tune(mod, target, params, log=path, budget=budget)  # the target the c+log column builds for
        print(f"tuned {name}: {len(tuned.results)} kernels, {tuned.measured} configurations measured "
              f"in {tuned.seconds:.1f} s", flush=True)


def print_machine(target: str) -> None:
    """The CPU and ISA level the numbers below were measured on, and what `target`'s C code is compiled for."""
    native = isa_level(native_cpu_flags()) or "not x86-64"
    print(f"CPU: {native_cpu_model() or platform.machine()}, {os.cpu_count()} logical cores, ISA level {native}")
    arch = host_arch(Target(target))
    compiled_for = f"native = {native}" if arch == "native" else arch
    print(f"target {target!r}: C compiled for {compiled_for} ({float32_lanes(Target(target))} float32 lanes "
          f"per vector)\n")


def print_header(variants: list[Variant]) -> None:
    cells = [f"{v.name + ' ms':>11s}" for v in variants] + [f"{'ort ms':>9s}"]
    cells += [f"{v.name + '/ort':>11s}" for v in variants]
    print(f"{'model':{NAME_WIDTH}s} {'thr':>3s} " + " ".join(cells) + f" {'max |diff|':>10s}")


def print_row(row: Row, variants: list[Variant]) -> None:
    ort = row.seconds["ort"]
    cells = [f"{row.seconds[v.name] * 1e3:11.2f}" for v in variants] + [f"{ort * 1e3:9.2f}"]
    cells += [f"{row.seconds[v.name] / ort:11.2f}" for v in variants]
    print(f"{row.model:{NAME_WIDTH}s} {row.threads:3d} " + " ".join(cells) + f" {row.error:10.2e}", flush=True)


def summary_line(label: str, ratios: dict[str, float]) -> str:
    """`label`'s geometric mean and worst model of tessera/onnxruntime `ratios` (model -> ratio)."""
    geo = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
    worst = max(ratios, key=ratios.__getitem__)
    return f"  {label:18s} {len(ratios):6d} {geo:8.2f}   {worst} {ratios[worst]:.2f}"


def print_summary(rows: list[Row], variants: list[Variant], threads: list[int]) -> None:
    for n in threads:
        at = [r for r in rows if r.threads == n]
        for v in variants:
            ratios = {r.model: r.seconds[v.name] / r.seconds["ort"] for r in at}
            print(f"\ntessera {v.name}/onnxruntime at {n} thread{'s' if n > 1 else ''}:")
            print(f"  {'family':18s} {'models':>6s} {'geomean':>8s}   worst")
            for family, members in FAMILIES.items():
                measured = {m: ratios[m] for m in members if m in ratios}
                if measured:
                    print(summary_line(family, measured))
            print(summary_line("all", ratios))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)} (default all)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    parser.add_argument("--tuning-log", metavar="LOG.json", help="add a column built with this tuning log")
    parser.add_argument("--tune", action="store_true", help="first tune the models into --tuning-log (resumes)")
    parser.add_argument("--tune-budget", type=float, default=120.0, help="seconds of tuning per model, at most")
    parser.add_argument("--blas", action="store_true", help="add a column for the blas target")
    parser.add_argument("--target", default="c", help="the host target of the c columns, e.g. 'c -mcpu=x86-64-v3' "
                        "for the AVX2 path on an AVX-512 machine (default c: this CPU)")
    parser.add_argument("--repeat", type=int, default=200, help="runs per median, at most (the budget ends it sooner)")
    parser.add_argument("--budget", type=float, default=16.0,
                        help="seconds of timing per model (all thread counts and columns), about")
    parser.add_argument("--no-compile-time", action="store_true", help="skip the ResNet-50 compile time")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    if args.tune and not args.tuning_log:
        parser.error("--tune needs --tuning-log LOG.json (the log to write)")
    if any(n < 1 for n in args.threads):
        parser.error(f"--threads must be positive, got {args.threads}")
    models = list(dict.fromkeys(args.models)) or list(MODELS)  # each once
    if args.tune:
        tune_models(models, args.tuning_log, args.tune_budget, args.target)
    variants = [Variant("c", args.target)]
    if args.tuning_log:
        variants.append(Variant("c+log", args.target, TuningLog.load(args.tuning_log)))
    if args.blas:
        variants.append(Variant("blas", "blas"))
    started = time.perf_counter()
    print_machine(args.target)
    print_header(variants)
    rows = []
    for name in models:
        for row in bench_model(name, variants, args.threads, args.repeat, args.budget):
            rows.append(row)
            print_row(row, variants)
    print_summary(rows, variants, args.threads)
    print(f"\nbenchmark time: {time.perf_counter() - started:.0f} s")
    if not args.no_compile_time:
        print(f"ResNet-50 compile time, Python side (gcc excluded): {resnet50_compile_time():.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
