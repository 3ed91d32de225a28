"""Compile the bundled digits CNN with tessera and run it on held-out digits.

The model (examples/digits/digits_cnn.onnx) was trained by
scripts/train_digits_cnn.py on scikit-learn's 8x8 handwritten digits. This
demo compiles it to C with tessera, exports one shared library, loads that
library back (as a deployment would), classifies the 360 held-out images,
and compares every output with onnxruntime's.

    python examples/digits/demo.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnx

import tessera
from tessera.frontend import from_onnx
from tessera.testing.models import ort_session

HERE = Path(__file__).resolve().parent
MODEL = HERE / "digits_cnn.onnx"
HELDOUT = HERE / "digits_heldout.npz"
SHADES = " .:-=+*#%@"


def ascii_digit(image: np.ndarray) -> list[str]:
    return ["".join(SHADES[min(int(v) * len(SHADES) // 17, len(SHADES) - 1)] * 2 for v in row) for row in image]


def main() -> int:
    out_dir = Path("out")
    out_dir.mkdir(exist_ok=True)
    library_path = out_dir / "digits_cnn.so"

    t0 = time.perf_counter()
    mod, params = from_onnx(str(MODEL))
    lib = tessera.build(mod, target="c", params=params)
    lib.export_library(library_path)
    print(f"compiled {MODEL.name} -> {library_path} in {time.perf_counter() - t0:.2f} s "
          f"({len(lib.module.function_names)} C kernels)")

    module = tessera.GraphModule(tessera.load_module(library_path))
    session = ort_session(onnx.load(MODEL))
    data = np.load(HELDOUT)
    images, labels = data["images"].astype(np.float32), data["labels"].astype(np.int64)

    ours, theirs = [], []
    for image in images:
        x = image.reshape(1, 1, 8, 8)
        ours.append(module(x)[0][0])
        theirs.append(session.run(None, {"image": x})[0][0])
    ours_arr, theirs_arr = np.stack(ours), np.stack(theirs)
    pred, ref_pred = ours_arr.argmax(1), theirs_arr.argmax(1)

    print("\nfirst held-out digits:")
    shown = [ascii_digit(images[k]) for k in range(6)]
    for row in range(8):
        print("   ".join(s[row] for s in shown))
    print("   ".join(f"label {labels[k]} -> {pred[k]}".ljust(16) for k in range(6)))

    acc, ref_acc = float((pred == labels).mean()), float((ref_pred == labels).mean())
    diff = float(np.abs(ours_arr - theirs_arr).max())
    print(f"\nheld-out accuracy: tessera {acc:.2%}, onnxruntime {ref_acc:.2%} ({len(labels)} images)")
    print(f"predictions identical to onnxruntime: {bool((pred == ref_pred).all())}")
    print(f"max |tessera - onnxruntime| over all logits: {diff:.3g}")
    ok = acc == ref_acc and diff < 1e-3
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
