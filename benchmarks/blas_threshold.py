"""Which convolutions pay on OpenBLAS: one convolution (with bias and ReLU) at a time, target `c`
against `blas`, at 1 and 2 threads, the runs alternating; the smallest time of each counts.

The shapes are the float convolutions of the given benchmark models (`latency.py`'s names), each once.
Prints per shape its multiply-adds per GEMM, whether blas must unfold it (im2col), and blas/c. The
blas target's thresholds (contrib/blas.py, MIN_MACS) and its HOST_GEMM_FIRST come from this table:
OpenBLAS gets every shape over the thresholds even where the host has its own GEMM (HOST_GEMM_FIRST
off for the run), and `--all` sets the thresholds to 0 too, so every shape goes to OpenBLAS (otherwise
a refused one runs the same host code in both columns, a ratio of about 1).

    python benchmarks/blas_threshold.py squeezenet kws_ds_cnn --threads 1 --all
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tessera
from latency import MODELS, load_model
from tessera import relay
from tessera.contrib import blas
from tessera.frontend import from_onnx
from tessera.op import elemwise as ew
from tessera.op.nn import conv
from tessera.op.nn.conv import ConvAttrs
from tessera.relay.expr import Call
from tessera.relay.visitor import post_order
from tessera.transform import PassContext
from tessera.transform.infer_type import InferType

Shape = tuple[tuple[int, ...], tuple[int, ...], ConvAttrs]


def model_convs(name: str) -> list[Shape]:
    model, _, _ = load_model(name)
    mod = InferType()(from_onnx(model)[0], PassContext())
    return [(tuple(n.args[0].checked_type_.shape), tuple(n.args[1].checked_type_.shape), n.attrs_as(ConvAttrs))
            for _, f in mod.items() for n in post_order(f.body)
            if isinstance(n, Call) and getattr(n.op, "name", "") == "nn.conv2d"]


def single_conv(data: tuple[int, ...], weight: tuple[int, ...], attrs: ConvAttrs) -> relay.IRModule:
    rng = np.random.default_rng(0)
    x = relay.Var("x", relay.TensorType(data, "float32"))
    w = relay.const(rng.standard_normal(weight).astype(np.float32))
    b = relay.const(rng.standard_normal((weight[0], 1, 1)).astype(np.float32))
    y = conv.conv2d(x, w, strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation, groups=attrs.groups)
    return relay.IRModule.from_expr(relay.Function((x,), ew.relu(ew.add(y, b))))


def gemm_size(data: tuple[int, ...], weight: tuple[int, ...], attrs: ConvAttrs) -> tuple[int, bool]:
    """Multiply-adds of one GEMM (per image and group), and whether blas unfolds the input."""
    oc, icpg, kh, kw = weight
    out = [(s + attrs.padding[i] + attrs.padding[i + 2] - attrs.dilation[i] * (k - 1) - 1) // attrs.strides[i] + 1
           for i, (s, k) in enumerate(zip(data[2:], (kh, kw)))]
    unfolds = not (kh == kw == 1 and attrs.strides == (1, 1) and not any(attrs.padding))
    return oc // attrs.groups * out[0] * out[1] * icpg * kh * kw, unfolds


def fastest(run, seconds: float) -> float:
    run()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", metavar="MODEL", choices=MODELS)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=0.2, help="timing per shape, column and round")
    parser.add_argument("--all", action="store_true", help="offload every shape (thresholds 0 for this run)")
    args = parser.parse_args()
    thresholds = dict(blas.MIN_MACS)
    blas.HOST_GEMM_FIRST = False  # what the rule is measured from
    if args.all:
        blas.MIN_MACS.update({unfolds: 0 for unfolds in blas.MIN_MACS})
    shapes = list(dict.fromkeys(s for name in args.models for s in model_convs(name)))
    print(f"{'multiply-adds':>13s} unfold {'data':>18s} {'weight':>18s} "
          + " ".join(f"{'blas/c@' + str(n):>9s}" for n in args.threads))
    for data, weight, attrs in shapes:
        if attrs.groups > 1 and weight[0] == attrs.groups:
            continue  # depthwise: stays on the host
        mod, x = single_conv(data, weight, attrs), np.random.default_rng(1).standard_normal(data).astype(np.float32)
        libs = {t: tessera.build(mod, target=t) for t in ("c", "blas")}
        ratios = []
        for n in args.threads:
            best = {}
            for _ in range(2):
                for t, lib in libs.items():
                    gm = tessera.GraphModule(lib, num_threads=n)
                    gm.set_input(0, x)
                    best[t] = min(best.get(t, float("inf")), fastest(gm.run, args.seconds))
            ratios.append(best["blas"] / best["c"])
        macs, unfolds = gemm_size(data, weight, attrs)
        taken = "" if macs >= thresholds[unfolds] else "  (under the threshold)"
        print(f"{macs:13d} {'yes' if unfolds else 'no':>6s} {'x'.join(map(str, data)):>18s} "
              f"{'x'.join(map(str, weight)):>18s} " + " ".join(f"{r:9.2f}" for r in ratios) + taken, flush=True)


if __name__ == "__main__":
    main()
