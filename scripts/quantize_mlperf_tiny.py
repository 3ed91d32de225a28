"""Quantise the four MLPerf Tiny models to int8 with onnxruntime, reproducibly, and check them.

For each model of ``tessera.testing.mlperf_tiny.MODELS`` and each format
(QDQ, and operator form with QLinearConv / QGemm / ...) this

* folds the batch norms and runs ``onnxruntime.quantization.quantize_static``
  (int8 activations and weights, per-channel weights, MinMax calibration on
  seeded random inputs; see ``tessera.testing.mlperf_tiny_int8``) twice and
  requires byte-identical files;
* writes ``<out>/<name>.int8.<fmt>.onnx`` and checks it with ``onnx.checker``;
* runs it in onnxruntime on ``sample_input`` next to the float32 model and
  reports how far the int8 output is from the float one (in output steps);

then prints a table (deterministic stdout; timing on stderr). Exits non-zero
if a build is not reproducible. Run from the repository root::

    python scripts/quantize_mlperf_tiny.py [-o out/mlperf_tiny_int8] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from tessera.testing import mlperf_tiny as mt
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.testing.models import ort_run
from tessera.util.atomic import atomic_write_bytes


def _step(model: onnx.ModelProto) -> float:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    return float(inits[last.input[1]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("out/mlperf_tiny_int8"), help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="weight and input seed")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    start = time.perf_counter()
    failed = False
    print(f"{'model':16s}{'format':>7s}{'nodes':>7s}{'int8 bytes':>14s}{'|int8-float|':>13s}{'steps':>7s}  sha256")
    for name in mt.MODELS:
        x = mt.sample_input(name, args.seed)
        reference = ort_run(mt.build(name, args.seed), {"input": x})[0]
        for fmt in q8.QuantFormat:
            model = q8.quantize(name, args.seed, fmt)
            data = model.SerializeToString()
            if data != q8.quantize(name, args.seed, fmt).SerializeToString():
                print(f"FAIL {name} {fmt.value}: two quantisations differ")
                failed = True
            path = args.out / f"{name}.int8.{fmt.value}.onnx"
            atomic_write_bytes(path, data)
            onnx.checker.check_model(str(path))
            diff = float(np.max(np.abs(ort_run(model, {"input": x})[0] - reference)))
            weights = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer
                          if numpy_helper.to_array(t).dtype == np.int8 and t.dims)
            steps = diff / _step(model) if fmt is q8.QuantFormat.QDQ else float("nan")
            print(f"{name:16s}{fmt.value:>7s}{len(model.graph.node):7d}{weights:14,d}{diff:13.4g}{steps:7.1f}  "
                  f"{hashlib.sha256(data).hexdigest()[:16]}")
    print(f"quantised {len(mt.MODELS)} models into {args.out} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
