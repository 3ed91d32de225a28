"""Build the four MLPerf Tiny v1.0 reference networks as ONNX files and sanity-check them.

For each model of ``tessera.testing.mlperf_tiny.MODELS`` this

* builds it twice with the same seed and requires byte-identical results;
* writes ``<out>/<name>.onnx`` and checks it with ``onnx.checker`` (full check,
  i.e. including strict shape inference, which also validates the builder's
  own shape bookkeeping);
* runs it in onnxruntime (one thread) on ``sample_input`` and measures the
  pre-softmax logits (for the autoencoder: its reconstruction output);

then prints a table: input shape, parameter count (every stored value, batch-norm
statistics included, as Keras ``model.summary()`` counts them; in brackets with
batch norms folded into the preceding layer), MACs of Conv/Gemm computed from
the graph, weight bytes, output shape, logits std, largest softmax probability
and the file's sha256 prefix. stdout is deterministic, so two runs can be
compared byte for byte; timing goes to stderr. Exits non-zero if a check fails
(logits std outside 0.1..100, uniform softmax, non-finite output, mismatched
shape or non-reproducible build). Run from the repository root::

    python scripts/build_mlperf_tiny.py [-o out/mlperf_tiny] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from tessera.testing.mlperf_tiny import (
    MODELS,
    build,
    count_macs,
    count_params,
    sample_input,
    weight_bytes,
)
from tessera.testing.models import logits_name, ort_run, with_output
from tessera.util.atomic import atomic_write_bytes

STD_RANGE = (0.1, 100.0)
UNIFORM_MARGIN = 0.02  # "non-uniform": max softmax probability > 1/classes + margin


@dataclass
class Row:
    """One line of the report."""

    model: str
    input_shape: tuple[int, ...]
    params: int
    folded_params: int
    macs: int
    weight_bytes: int
    output_shape: tuple[int, ...]
    expected_output_shape: tuple[int, ...]
    logits_std: float
    max_p: float | None  # None when the model has no softmax
    finite: bool
    deterministic: bool
    sha256: str

    def problems(self) -> list[str]:
        """Why this model is unusable as a benchmark / test fixture (empty if fine)."""
        found = []
        if not self.deterministic:
            found.append("two builds with the same seed differ")
        if not self.finite:
            found.append("non-finite output")
        if self.output_shape != self.expected_output_shape:
            found.append(f"output shape {self.output_shape} != {self.expected_output_shape}")
        if not STD_RANGE[0] <= self.logits_std <= STD_RANGE[1]:
            found.append(f"logits std {self.logits_std:.3g} outside {STD_RANGE}")
        if self.max_p is not None and self.max_p <= 1 / self.output_shape[-1] + UNIFORM_MARGIN:
            found.append(f"softmax is (nearly) uniform: max p {self.max_p:.4f}")
        return found


def bn_channels(model: onnx.ModelProto) -> int:
    """Channels normalised by BatchNormalization nodes: each carries 4 stored values."""
    dims = {t.name: t.dims for t in model.graph.initializer}
    return sum(dims[n.input[1]][0] for n in model.graph.node if n.op_type == "BatchNormalization")


def check(name: str, out_dir: Path, seed: int) -> Row:
    """Build, save, check and run one model."""
    model = build(name, seed)
    data = model.SerializeToString()
    path = out_dir / f"{name}.onnx"
    atomic_write_bytes(path, data)
    onnx.checker.check_model(str(path), full_check=True)

    logits_out = logits_name(model)
    output, logits = ort_run(with_output(model, logits_out), {"input": sample_input(name, seed)},
                             ["output", logits_out], threads=1)  # fmt: skip
    spec = MODELS[name]
    params = count_params(model)
    return Row(
        model=name,
        input_shape=spec.input_shape,
        params=params,
        folded_params=params - 4 * bn_channels(model),
        macs=count_macs(model),
        weight_bytes=weight_bytes(model),
        output_shape=tuple(output.shape),
        expected_output_shape=spec.output_shape,
        logits_std=float(logits.std()),
        max_p=float(output.max()) if spec.has_softmax else None,
        finite=bool(np.isfinite(output).all() and np.isfinite(logits).all()),
        deterministic=data == build(name, seed).SerializeToString(),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def print_table(rows: list[Row]) -> None:
    """One line per model; columns as described in the module docstring."""
    header = (
        f"{'model':<16}{'input':>12}{'params':>9}{'(folded)':>10}{'MACs':>12}{'weight B':>10}"
        f"{'output':>9}{'logits std':>12}{'max p':>8}  sha256"
    )
    print(header)
    print("-" * (len(header) + 10))
    for r in rows:
        max_p = "-" if r.max_p is None else f"{r.max_p:.4f}"
        print(
            f"{r.model:<16}{_shape(r.input_shape):>12}{r.params:>9,}{f'({r.folded_params:,})':>10}{r.macs:>12,}"
            f"{r.weight_bytes:>10,}{_shape(r.output_shape):>9}{r.logits_std:>12.4f}{max_p:>8}  {r.sha256[:16]}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("out/mlperf_tiny"), help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="weight and input seed")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    rows = [check(name, args.out, args.seed) for name in MODELS]
    print_table(rows)
    failed = False
    for r in rows:
        for problem in r.problems():
            print(f"FAIL {r.model}: {problem}")
            failed = True
    print(f"built and checked {len(rows)} models into {args.out} in {time.perf_counter() - start:.2f}s",
          file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
