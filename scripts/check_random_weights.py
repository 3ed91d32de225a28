"""Check that ``tessera.testing.weights.randomize_weights`` gives useful light models.

For each of the nine ``onnx/backend/test/data/light/*.onnx`` models this
randomizes the weights (seed 0), runs the result in onnxruntime (one thread) on a
seeded standard-normal input and prints a table with:

* how many weights were replaced (from ``ConstantOfShape`` nodes / initializers);
* the standard deviation of the pre-softmax logits (the input of the final
  ``Softmax``, exposed as an extra graph output; DenseNet-121 has no Softmax, its
  graph output already is the logits), which should lie in ~0.1..100;
* the largest softmax probability of the original and of the randomized model
  (the original is a uniform 1/1000; the randomized one must clearly beat that);
* whether all outputs are finite and whether randomizing twice is byte-identical.

Exits non-zero if any model fails. Run from the repository root::

    python scripts/check_random_weights.py
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from tessera.testing.models import LIGHT_DIR, data_input, logits_name, ort_run, with_output
from tessera.testing.weights import find_weights, randomize_weights

SEED = 0
STD_RANGE = (0.1, 100.0)
UNIFORM_MARGIN = 2.0  # "non-uniform" means max prob > UNIFORM_MARGIN / num_classes


@dataclass
class Row:
    """One line of the report."""

    model: str
    num_classes: int
    from_cos: int
    from_init: int
    logits_std: float
    orig_max_p: float
    max_p: float
    finite: bool
    deterministic: bool
    seconds: float

    def ok(self) -> bool:
        """In range, finite, clearly non-uniform and reproducible."""
        return (
            self.finite
            and self.deterministic
            and STD_RANGE[0] <= self.logits_std <= STD_RANGE[1]
            and self.max_p > UNIFORM_MARGIN / self.num_classes
        )


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
    """Run ``model`` in single-threaded onnxruntime."""
    return ort_run(model, feed, outputs)


def softmax(x: np.ndarray) -> np.ndarray:
    """Numerically stable softmax of a 1-D vector."""
    z = np.exp(x - x.max())
    return z / z.sum()


def check(path: Path) -> Row:
    """Randomize one light model and measure its outputs."""
    start = time.perf_counter()
    original = onnx.load(str(path))
    weights = find_weights(original)
    model = randomize_weights(original, seed=SEED)
    onnx.checker.check_model(model)
    deterministic = model.SerializeToString() == randomize_weights(original, seed=SEED).SerializeToString()

    name, shape = data_input(model)
    feed = {name: np.random.default_rng(SEED).standard_normal(shape).astype(np.float32)}
    logits_out = logits_name(model)
    logits = run(with_output(model, logits_out), feed, [logits_out])[0].ravel()
    orig_logits = run(with_output(original, logits_out), feed, [logits_out])[0].ravel()
    probs = softmax(logits.astype(np.float64))
    return Row(
        model=path.stem.removeprefix("light_"),
        num_classes=logits.size,
        from_cos=sum(w.source == "ConstantOfShape" for w in weights.values()),
        from_init=sum(w.source == "initializer" for w in weights.values()),
        logits_std=float(logits.std()),
        orig_max_p=float(softmax(orig_logits.astype(np.float64)).max()),
        max_p=float(probs.max()),
        finite=bool(np.isfinite(logits).all()),
        deterministic=deterministic,
        seconds=time.perf_counter() - start,
    )


def print_table(rows: list[Row]) -> None:
    """One line per model; columns as described in the module docstring."""
    header = f"{'model':<14}{'COS':>5}{'init':>6}{'logits std':>12}{'orig max p':>12}{'max p':>9}  finite  det  ok    time"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.model:<14}{r.from_cos:>5}{r.from_init:>6}{r.logits_std:>12.3f}{r.orig_max_p:>12.5f}"
            f"{r.max_p:>9.4f}  {str(r.finite):<6}  {'yes' if r.deterministic else 'NO':<3}  "
            f"{'yes' if r.ok() else 'NO':<3}{r.seconds:>6.1f}s"
        )


def main() -> int:
    paths = sorted(LIGHT_DIR.glob("light_*.onnx"))
    rows = []
    for path in paths:
        rows.append(check(path))
        print(f"checked {path.name}", file=sys.stderr, flush=True)
    print_table(rows)
    return 0 if rows and all(r.ok() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
