"""Train a tiny CNN on scikit-learn's 8x8 digits in pure NumPy and export it to ONNX.

The model is a small, real (trained) network that tessera's end-to-end tests can
compile and check against held-out labels, not only against another runtime.

What it does:

* loads ``sklearn.datasets.load_digits()`` (1797 grey 8x8 images, pixel values
  0..16, 10 classes) and holds out the last 360 images (written by different
  people than most of the training images, so the split is honest);
* trains, with hand-written forward and backward passes (im2col convolutions),
  ``Conv3x3(32)+ReLU+MaxPool2 -> Conv3x3(64)+ReLU+MaxPool2 -> Flatten -> Dense(10)``
  with Adam (cosine learning-rate decay, random +-1 pixel shifts as augmentation),
  fully seeded (``numpy.random.default_rng``) and with single-threaded BLAS so
  that two runs give byte-identical outputs;
* exports the network with ``onnx.helper`` (opset 13, IR version 8, batch 1).
  The model takes raw 0..16 pixel values as input ``image`` [1, 1, 8, 8] float32
  (the /16 scaling is a ``Div`` node inside the model) and returns ``logits``
  [1, 10];
* checks the model with ``onnx.checker`` and verifies that onnxruntime's
  held-out accuracy equals the NumPy accuracy.

Outputs (paths relative to the repository root):

* ``examples/digits/digits_cnn.onnx`` -- the trained model (about 85 KB);
* ``examples/digits/digits_heldout.npz`` -- ``images`` (uint8, N x 8 x 8, raw
  0..16 values) and ``labels`` (uint8) of the held-out set.

Run from the repository root (takes a few seconds)::

    python scripts/train_digits_cnn.py
"""

from __future__ import annotations

import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

SEED = 20240607
HELD_OUT = 360
EPOCHS = 20
BATCH = 32
LEARNING_RATE = 3e-3
C1, C2, NUM_CLASSES = 32, 64, 10
PIXEL_MAX = 16.0

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = REPO_ROOT / "examples" / "digits"
MODEL_PATH = OUT_DIR / "digits_cnn.onnx"
HELDOUT_PATH = OUT_DIR / "digits_heldout.npz"

Params = dict[str, np.ndarray]


# ----------------------------------------------------------------------------
# Layers: forward functions return (output, cache); backward ones take the cache.
# ----------------------------------------------------------------------------


def im2col(x: np.ndarray) -> np.ndarray:
    """Patches of a 3x3, stride-1, pad-1 convolution as rows of (C*3*3) values.

    Column order is (c, kh, kw) so a weight of ONNX layout [O, C, 3, 3] reshaped to
    [O, C*9] multiplies the rows directly.
    """
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, c, 3, 3, h, w), dtype=x.dtype)
    for i in range(3):
        for j in range(3):
            cols[:, :, i, j] = xp[:, :, i : i + h, j : j + w]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * h * w, c * 9)


def col2im(dcols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Adjoint of :func:`im2col`: scatter-add patch gradients back to the image."""
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, 3, 3).transpose(0, 3, 4, 5, 1, 2)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype=dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i : i + h, j : j + w] += d[:, :, i, j]
    return dxp[:, :, 1:-1, 1:-1]


def conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, tuple]:
    """3x3 'same' convolution with bias; x is NCHW, w is [O, C, 3, 3]."""
    n, _, h, wd = x.shape
    cols = im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), (x.shape, cols, w)


def conv_backward(dout: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (dx, dw, db) of :func:`conv_forward`."""
    x_shape, cols, w = cache
    d = dout.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(axis=0)
    dx = col2im(d @ w.reshape(w.shape[0], -1), x_shape)
    return dx, dw, db


def relu_forward(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.maximum(x, 0.0), x > 0


def relu_backward(dout: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return dout * mask


def maxpool_forward(x: np.ndarray) -> tuple[np.ndarray, tuple]:
    """2x2 / stride-2 max pooling (H and W must be even)."""
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    win = win.reshape(n, c, h // 2, w // 2, 4)
    # argmax picks the first maximum, so ties (e.g. ReLU zeros) get one gradient
    arg = win.argmax(axis=-1)
    out = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    return out, (x.shape, arg)


def maxpool_backward(dout: np.ndarray, cache: tuple) -> np.ndarray:
    """Route each output gradient to the window element that was the maximum."""
    (n, c, h, w), arg = cache
    dwin = np.zeros((n, c, h // 2, w // 2, 4), dtype=dout.dtype)
    np.put_along_axis(dwin, arg[..., None], dout[..., None], axis=-1)
    dwin = dwin.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    return dwin.reshape(n, c, h, w)


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy loss and its gradient w.r.t. the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = labels.shape[0]
    loss = -np.log(p[np.arange(n), labels] + 1e-12).mean()
    p[np.arange(n), labels] -= 1.0
    return float(loss), p / n


# ----------------------------------------------------------------------------
# Network
# ----------------------------------------------------------------------------


def init_params(rng: np.random.Generator) -> Params:
    """He-normal weights, zero biases."""

    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)

    return {
        "conv1_w": he((C1, 1, 3, 3), 9),
        "conv1_b": np.zeros(C1),
        "conv2_w": he((C2, C1, 3, 3), C1 * 9),
        "conv2_b": np.zeros(C2),
        "fc_w": he((NUM_CLASSES, C2 * 4), C2 * 4),  # [out, in] as Gemm transB=1
        "fc_b": np.zeros(NUM_CLASSES),
    }


def forward(p: Params, x: np.ndarray) -> tuple[np.ndarray, list]:
    """Logits for images already scaled to [0, 1], shape [N, 1, 8, 8]."""
    h, c1 = conv_forward(x, p["conv1_w"], p["conv1_b"])
    h, r1 = relu_forward(h)
    h, m1 = maxpool_forward(h)
    h, c2 = conv_forward(h, p["conv2_w"], p["conv2_b"])
    h, r2 = relu_forward(h)
    h, m2 = maxpool_forward(h)
    flat = h.reshape(h.shape[0], -1)
    logits = flat @ p["fc_w"].T + p["fc_b"]
    return logits, [c1, r1, m1, c2, r2, m2, h.shape, flat]


def backward(p: Params, dlogits: np.ndarray, caches: list) -> Params:
    """Parameter gradients given the gradient of the loss w.r.t. the logits."""
    c1, r1, m1, c2, r2, m2, pooled_shape, flat = caches
    g: Params = {"fc_w": dlogits.T @ flat, "fc_b": dlogits.sum(axis=0)}
    d = (dlogits @ p["fc_w"]).reshape(pooled_shape)
    d = relu_backward(maxpool_backward(d, m2), r2)
    d, g["conv2_w"], g["conv2_b"] = conv_backward(d, c2)
    d = relu_backward(maxpool_backward(d, m1), r1)
    _, g["conv1_w"], g["conv1_b"] = conv_backward(d, c1)
    return g


@dataclass
class Adam:
    """Plain Adam (Kingma & Ba) over a dict of parameters."""

    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    step: int = 0

    def __post_init__(self) -> None:
        self.m: Params = {}
        self.v: Params = {}

    def update(self, params: Params, grads: Params) -> None:
        self.step += 1
        for k, g in grads.items():
            m = self.m.setdefault(k, np.zeros_like(g))
            v = self.v.setdefault(k, np.zeros_like(g))
            m *= self.beta1
            m += (1 - self.beta1) * g
            v *= self.beta2
            v += (1 - self.beta2) * g * g
            m_hat = m / (1 - self.beta1**self.step)
            v_hat = v / (1 - self.beta2**self.step)
            params[k] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def predict(p: Params, x: np.ndarray) -> np.ndarray:
    return forward(p, x)[0].argmax(axis=1)


def random_shift(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shift each image by -1..1 pixels in y and x (zero fill).

    The held-out images come from other writers; small shifts are the cheapest
    augmentation that makes the net robust to how digits sit in the 8x8 box.
    """
    n, _, h, w = x.shape
    dy = rng.integers(-1, 2, size=n)
    dx = rng.integers(-1, 2, size=n)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.empty_like(x)
    for k in range(n):
        out[k] = xp[k, :, 1 + dy[k] : 1 + dy[k] + h, 1 + dx[k] : 1 + dx[k] + w]
    return out


def train(p: Params, x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> None:
    """Minibatch Adam with cosine decay, reshuffling with the seeded rng every epoch."""
    opt = Adam(lr=LEARNING_RATE)
    n = x.shape[0]
    steps_per_epoch = -(-n // BATCH)
    total_steps = EPOCHS * steps_per_epoch
    for epoch in range(1, EPOCHS + 1):
        order = rng.permutation(n)
        total = 0.0
        for step, start in enumerate(range(0, n, BATCH)):
            done = (epoch - 1) * steps_per_epoch + step
            opt.lr = LEARNING_RATE * 0.5 * (1.0 + np.cos(np.pi * done / total_steps))
            idx = order[start : start + BATCH]
            logits, caches = forward(p, random_shift(x[idx], rng))
            loss, dlogits = softmax_cross_entropy(logits, y[idx])
            opt.update(p, backward(p, dlogits, caches))
            total += loss * idx.size
        acc = (predict(p, x) == y).mean()
        print(f"epoch {epoch:2d}  loss {total / n:.4f} (shifted batches)  train acc {acc:.4f}")


# ----------------------------------------------------------------------------
# Export and verification
# ----------------------------------------------------------------------------


def to_onnx(p: Params) -> onnx.ModelProto:
    """The trained network as an ONNX graph with the /16 input scaling built in."""
    f32 = {k: v.astype(np.float32) for k, v in p.items()}
    inits = [numpy_helper.from_array(v, name=k) for k, v in f32.items()]
    inits.append(numpy_helper.from_array(np.array(PIXEL_MAX, np.float32), name="pixel_max"))
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Div", ["image", "pixel_max"], ["scaled"], name="scale"),
        helper.make_node("Conv", ["scaled", "conv1_w", "conv1_b"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", **pool),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", **pool),
        helper.make_node("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, NUM_CLASSES])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        producer_name="tessera/scripts/train_digits_cnn.py",
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 8
    model.doc_string = "Tiny CNN on sklearn digits; input raw 0..16 pixels, output logits."
    onnx.checker.check_model(model, full_check=True)
    return model


def onnxruntime_predictions(model: onnx.ModelProto, images: np.ndarray) -> np.ndarray:
    """Run the batch-1 model image by image in onnxruntime."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = images.astype(np.float32)[:, None, None]  # [N, 1, 1, 8, 8]
    return np.array([sess.run(["logits"], {"image": xi})[0][0] for xi in x])


def save_npz_deterministic(path: Path, **arrays: np.ndarray) -> None:
    """Like np.savez, but with a fixed zip timestamp so reruns are byte-identical."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, "w") as f:
                np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)


def main() -> None:
    start = time.perf_counter()
    rng = np.random.default_rng(SEED)
    digits = load_digits()
    images = digits.images.astype(np.float64)  # [1797, 8, 8], values 0..16
    labels = digits.target.astype(np.int64)
    x = (images / PIXEL_MAX)[:, None]  # NCHW in [0, 1]
    x_train, y_train = x[:-HELD_OUT], labels[:-HELD_OUT]
    x_test, y_test = x[-HELD_OUT:], labels[-HELD_OUT:]
    print(f"train {len(y_train)} images, held out {len(y_test)} images")

    params = init_params(rng)
    train(params, x_train, y_train, rng)
    train_time = time.perf_counter() - start

    # NumPy reference uses exactly the float32 weights that go into the model.
    params32 = {k: v.astype(np.float32) for k, v in params.items()}
    np_logits = forward(params32, (images[-HELD_OUT:].astype(np.float32) / PIXEL_MAX)[:, None])[0]
    np_acc = (np_logits.argmax(axis=1) == y_test).mean()

    model = to_onnx(params)
    ort_logits = onnxruntime_predictions(model, images[-HELD_OUT:])
    ort_acc = (ort_logits.argmax(axis=1) == y_test).mean()
    print(f"held-out accuracy: numpy {np_acc:.4f}  onnxruntime {ort_acc:.4f}")
    print(f"max |logit difference| numpy vs onnxruntime: {np.abs(np_logits - ort_logits).max():.2e}")
    if np_acc != ort_acc or not np.array_equal(np_logits.argmax(1), ort_logits.argmax(1)):
        raise SystemExit("onnxruntime predictions differ from the NumPy reference")

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    onnx.save(model, MODEL_PATH)
    save_npz_deterministic(
        HELDOUT_PATH,
        images=images[-HELD_OUT:].astype(np.uint8),
        labels=y_test.astype(np.uint8),
    )
    print(f"wrote {MODEL_PATH.relative_to(REPO_ROOT)} ({MODEL_PATH.stat().st_size} bytes)")
    print(f"wrote {HELDOUT_PATH.relative_to(REPO_ROOT)} ({HELDOUT_PATH.stat().st_size} bytes)")
    print(f"training {train_time:.1f} s, total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    # One BLAS thread: reductions then happen in a fixed order, so reruns match bit for bit.
    with threadpool_limits(limits=1):
        main()
