"""Build the TFLite test models with TensorFlow's own converter, reproducibly.

Writes, under ``tests/data/tflite/``:

* ``mlperf_tiny/<name>.int8.tflite``: the four MLPerf Tiny reference
  architectures (keyword spotting DS-CNN, visual wake words MobileNetV1 0.25,
  image classification ResNet-8, anomaly detection autoencoder), written as in
  the mlcommons/tiny Keras training code, with seeded random weights and
  batch-norm statistics, converted by ``tf.lite.TFLiteConverter`` with
  full-integer quantisation calibrated on seeded standard-normal samples.
  Inputs and outputs are int8, as in the published MLPerf Tiny models (what
  TFLite Micro runs);
* ``ops/<op>.<float|int8>.tflite``: one small Keras model per operator family
  the importer converts, as a float model and as a full-integer one with float
  inputs and outputs (so QUANTIZE and DEQUANTIZE are covered too);
* ``unsupported/gather.float.tflite``: an operator tessera does not convert
  (for the importer's error message).

TensorFlow is a dependency of this script only (tests use the committed
files and LiteRT). Run from the repository root, in a venv with
``tensorflow-cpu``::

    python scripts/make_tflite_models.py [-o tests/data/tflite] [--seed 0] [--only mlperf|ops|NAME]

Same arguments and TensorFlow version give byte-identical files.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
layers = keras.layers
CALIBRATION_SAMPLES = 16


# --------------------------------------------------------------------------- MLPerf Tiny
def _bn_relu(x: tf.Tensor) -> tf.Tensor:
    return layers.ReLU()(layers.BatchNormalization()(x))


def kws_ds_cnn() -> keras.Model:
    """DS-CNN small (benchmark/training/keyword_spotting/keras_model.py); dropout is an inference no-op."""
    inp = keras.Input((49, 10, 1))
    x = _bn_relu(layers.Conv2D(64, (10, 4), strides=(2, 2), padding="same")(inp))
    for _ in range(4):
        x = _bn_relu(layers.DepthwiseConv2D((3, 3), padding="same")(x))
        x = _bn_relu(layers.Conv2D(64, (1, 1), padding="same")(x))
    x = layers.AveragePooling2D(pool_size=(49 // 2, 10 // 2))(x)
    return keras.Model(inp, layers.Dense(12, activation="softmax")(layers.Flatten()(x)))


_MOBILENET_BLOCKS = ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1), (128, 1),
                     (128, 1), (128, 1), (256, 2), (256, 1))


def vww_mobilenet() -> keras.Model:
    """MobileNetV1 alpha 0.25 (benchmark/training/visual_wake_words/vww_model.py), plain ReLU."""
    inp = keras.Input((96, 96, 3))
    x = _bn_relu(layers.Conv2D(8, 3, strides=2, padding="same")(inp))
    for filters, stride in _MOBILENET_BLOCKS:
        x = _bn_relu(layers.DepthwiseConv2D(3, strides=stride, padding="same")(x))
        x = _bn_relu(layers.Conv2D(filters, 1, padding="same")(x))
    x = layers.AveragePooling2D(pool_size=x.shape[1:3])(x)
    return keras.Model(inp, layers.Dense(2, activation="softmax")(layers.Flatten()(x)))


def ic_resnet8() -> keras.Model:
    """ResNet-8 (benchmark/training/image_classification/keras_model.py, resnet_v1_eembc, 16 filters)."""
    inp = keras.Input((32, 32, 3))
    x = _bn_relu(layers.Conv2D(16, 3, padding="same")(inp))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        y = _bn_relu(layers.Conv2D(filters, 3, strides=stride, padding="same")(x))
        y = layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same")(y))
        if stride != 1:
            x = layers.Conv2D(filters, 1, strides=stride, padding="same")(x)
        x = layers.ReLU()(layers.Add()([x, y]))
    x = layers.AveragePooling2D(pool_size=x.shape[1:3])(x)
    return keras.Model(inp, layers.Dense(10, activation="softmax")(layers.Flatten()(x)))


def ad_autoencoder() -> keras.Model:
    """FC autoencoder (benchmark/training/anomaly_detection/keras_model.py)."""
    inp = keras.Input((640,))
    x = inp
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = _bn_relu(layers.Dense(units)(x))
    return keras.Model(inp, layers.Dense(640)(x))


MLPERF_TINY: dict[str, Callable[[], keras.Model]] = {
    "kws_ds_cnn": kws_ds_cnn, "vww_mobilenet": vww_mobilenet, "ic_resnet8": ic_resnet8,
    "ad_autoencoder": ad_autoencoder,
}


# --------------------------------------------------------------------------- one op each
def _single(shape: tuple[int, ...], body: Callable[[tf.Tensor], tf.Tensor]) -> Callable[[], keras.Model]:
    def build() -> keras.Model:
        inp = keras.Input(shape)
        return keras.Model(inp, body(inp))

    return build


def _two(shape: tuple[int, ...], body: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]) -> Callable[[], keras.Model]:
    def build() -> keras.Model:
        a, b = keras.Input(shape), keras.Input(shape)
        return keras.Model([a, b], body(a, b))

    return build


def _hard_swish(x: tf.Tensor) -> tf.Tensor:
    return x * tf.nn.relu6(x + 3.0) / 6.0


def _inverted_residual(x: tf.Tensor) -> tf.Tensor:
    """A MobileNetV3 block: expand with hard-swish, depthwise, squeeze-excitation (broadcast MUL), project, add."""
    y = layers.Activation("hard_swish")(layers.Conv2D(24, 1)(x))
    y = layers.Activation("hard_swish")(layers.DepthwiseConv2D(3, padding="same")(y))
    s = layers.GlobalAveragePooling2D(keepdims=True)(y)
    s = layers.Conv2D(24, 1, activation="hard_sigmoid")(layers.Conv2D(8, 1, activation="relu")(s))
    return layers.Add()([x, layers.Conv2D(8, 1)(layers.Multiply()([y, s]))])


OPS: dict[str, Callable[[], keras.Model]] = {
    "inverted_residual": _single((12, 12, 8), _inverted_residual),
    "conv_2d": _single((9, 8, 3), lambda x: layers.Conv2D(5, 3, strides=2, padding="same", activation="relu6")(x)),
    "conv_2d_valid": _single((9, 8, 4), lambda x: layers.Conv2D(6, (3, 2), padding="valid")(x)),
    "depthwise_conv_2d": _single((10, 9, 6), lambda x: layers.DepthwiseConv2D(3, strides=2, padding="same",
                                                                              activation="relu")(x)),
    "depthwise_multiplier": _single((8, 8, 3), lambda x: layers.DepthwiseConv2D(3, depth_multiplier=2)(x)),
    "fully_connected": _single((24,), lambda x: layers.Dense(10, activation="relu")(x)),
    "fully_connected_per_tensor": _single((24,), lambda x: layers.Dense(10)(x)),
    "conv_2d_per_tensor": _single((7, 6, 3), lambda x: layers.Conv2D(4, 3, padding="same")(x)),
    "average_pool_2d": _single((8, 8, 4), lambda x: layers.AveragePooling2D(2)(x)),
    "max_pool_2d": _single((9, 9, 4), lambda x: layers.MaxPooling2D(3, strides=2, padding="same")(x)),
    "add": _two((6, 5, 4), lambda a, b: layers.Add()([a, b])),
    "add_broadcast": _single((6, 5, 4), lambda x: layers.Add()([x, layers.GlobalAveragePooling2D(keepdims=True)(x)])),
    "mul": _two((6, 5, 4), lambda a, b: layers.Multiply()([a, b])),
    "reshape": _single((4, 3, 2), lambda x: layers.Reshape((24,))(layers.ReLU()(layers.Reshape((6, 4))(x)))),
    "softmax": _single((10,), lambda x: layers.Softmax()(x)),
    "pad": _single((5, 4, 3), lambda x: layers.ZeroPadding2D(((1, 2), (0, 1)))(x)),
    "mean": _single((6, 5, 4), lambda x: layers.GlobalAveragePooling2D()(x)),
    "mean_keepdims": _single((6, 5, 4), lambda x: layers.GlobalAveragePooling2D(keepdims=True)(x)),
    "concatenation": _two((4, 4, 3), lambda a, b: layers.Concatenate(axis=-1)([a, b])),
    "relu": _single((20,), lambda x: layers.ReLU()(x)),
    "relu6": _single((20,), lambda x: layers.ReLU(6.0)(x)),
    "logistic": _single((20,), lambda x: layers.Activation("sigmoid")(x)),
    "tanh": _single((20,), lambda x: layers.Activation("tanh")(x)),
    "hard_swish": _single((20,), lambda x: layers.Lambda(_hard_swish)(x)),
    "transpose": _single((4, 3, 2), lambda x: layers.Permute((3, 1, 2))(x)),
    "strided_slice": _single((8, 6, 4), lambda x: layers.Lambda(lambda t: t[:, 1:7:2, ::2, 1:3])(x)),
}


# Quantised with one weight scale per tensor instead of per output channel (LiteRT computes their
# multipliers differently).
PER_TENSOR = {"fully_connected_per_tensor", "conv_2d_per_tensor"}

# An operator tessera does not convert, for the importer's error message.
UNSUPPORTED: dict[str, Callable[[], keras.Model]] = {
    "gather": _single((6, 4), lambda x: layers.Lambda(lambda t: tf.gather(t, [3, 0, 2], axis=1))(x)),
}


# --------------------------------------------------------------------------- weights, calibration, conversion
def randomise(model: keras.Model, rng: np.random.Generator) -> None:
    """Seeded random weights; batch-norm statistics away from the identity so folding them matters."""
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            c = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.8, 1.2, c), 0.1 * rng.standard_normal(c),
                               0.1 * rng.standard_normal(c), rng.uniform(0.5, 1.5, c)])
        elif layer.weights:
            values = []
            for w in layer.get_weights():
                fan_in = int(np.prod(w.shape[:-1])) if w.ndim > 1 else 1
                std = np.sqrt(2.0 / fan_in) if w.ndim > 1 else 0.01
                values.append((std * rng.standard_normal(w.shape)).astype(np.float32))
            layer.set_weights(values)


def calibration(model: keras.Model, seed: int) -> Callable[[], Iterator[list[np.ndarray]]]:
    shapes = [tuple(i.shape[1:]) for i in model.inputs]

    def samples() -> Iterator[list[np.ndarray]]:
        rng = np.random.default_rng(seed + 1000)
        for _ in range(CALIBRATION_SAMPLES):
            yield [rng.standard_normal((1, *s)).astype(np.float32) for s in shapes]

    return samples


def convert(model: keras.Model, seed: int, int8: bool, int8_io: bool, per_tensor: bool = False) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if per_tensor:  # (private converter flags: the public API has no switch for this)
        converter._experimental_disable_per_channel = True
        converter._experimental_disable_per_channel_quantization_for_dense_layers = True
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = calibration(model, seed)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if int8_io:
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
    return bytes(converter.convert())


def build(factory: Callable[[], keras.Model], seed: int) -> keras.Model:
    keras.backend.clear_session()  # layer names count from zero again: each file is the same in any run
    keras.utils.set_random_seed(seed)
    model = factory()
    randomise(model, np.random.default_rng(seed))
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("tests/data/tflite"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="'mlperf', 'ops', or one operator model's name")
    args = parser.parse_args(argv)
    jobs: list[tuple[Path, Callable[[], keras.Model], bool, bool]] = []  # (file, model, int8, int8 in/out)
    if args.only in (None, "mlperf"):
        jobs += [(args.out / "mlperf_tiny" / f"{n}.int8.tflite", f, True, True) for n, f in MLPERF_TINY.items()]
    if args.only not in ("mlperf",):
        for name, factory in OPS.items():
            if args.only not in (None, "ops", name):
                continue
            jobs.append((args.out / "ops" / f"{name}.float.tflite", factory, False, False))
            jobs.append((args.out / "ops" / f"{name}.int8.tflite", factory, True, False))
    if args.only in (None, "ops"):
        jobs += [(args.out / "unsupported" / f"{n}.float.tflite", f, False, False) for n, f in UNSUPPORTED.items()]
    for path, factory, int8, int8_io in jobs:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = convert(build(factory, args.seed), args.seed, int8, int8_io, path.name.split(".")[0] in PER_TENSOR)
        path.write_bytes(data)
        print(f"{path}: {len(data):,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
