"""The MLPerf Tiny reference models: valid, reproducible, well-scaled and of the right size."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tessera.testing import mlperf_tiny as mt
from tessera.testing.models import logits_name, ort_run, with_output

ALLOWED_OPS = {
    "Conv", "BatchNormalization", "Relu", "Clip", "Add", "AveragePool", "GlobalAveragePool",
    "Flatten", "Reshape", "Gemm", "MatMul", "Softmax",
}  # fmt: skip

# Stored values including batch-norm statistics (what Keras' model.summary() reports
# as "Total params"): DS-CNN 24,908, ResNet-8 78,666, MobileNetV1-0.25 221,794 (210,850
# with batch norms folded, hence the upper bound slightly above 220k), autoencoder 269,992.
PARAM_RANGES = {
    "kws_ds_cnn": (20_000, 40_000),
    "ic_resnet8": (76_000, 80_000),
    "vww_mobilenet": (200_000, 225_000),
    "ad_autoencoder": (260_000, 280_000),
}

NAMES = sorted(mt.MODELS)


@pytest.fixture(scope="module", params=NAMES)
def built(request) -> tuple[str, onnx.ModelProto]:
    return request.param, mt.build(request.param)


def test_passes_full_checker_with_documented_interface(built):
    name, model = built
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8 and [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    (inp,), (out,) = model.graph.input, model.graph.output
    assert inp.name == "input" and out.name == "output"
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert tuple(d.dim_value for d in inp.type.tensor_type.shape.dim) == mt.MODELS[name].input_shape
    assert tuple(d.dim_value for d in out.type.tensor_type.shape.dim) == mt.MODELS[name].output_shape
    assert {n.op_type for n in model.graph.node} <= ALLOWED_OPS


def test_same_seed_is_byte_identical_other_seed_differs(built):
    name, model = built
    data = model.SerializeToString()
    assert mt.build(name, seed=0).SerializeToString() == data
    assert mt.build(name, seed=1).SerializeToString() != data


def test_parameter_count_in_ballpark(built):
    name, model = built
    low, high = PARAM_RANGES[name]
    assert low <= mt.count_params(model) <= high
    assert mt.weight_bytes(model) == 4 * mt.count_params(model)


def test_runs_in_onnxruntime_with_finite_non_uniform_output(built):
    pytest.importorskip("onnxruntime")
    name, model = built
    spec = mt.MODELS[name]
    logits_out = logits_name(model)
    output, logits = ort_run(with_output(model, logits_out), {"input": mt.sample_input(name)}, ["output", logits_out])
    assert output.shape == spec.output_shape
    assert np.isfinite(output).all() and np.isfinite(logits).all()
    assert 0.1 <= logits.std() <= 100
    if spec.has_softmax:
        assert output.sum() == pytest.approx(1.0, abs=1e-5)
        assert output.max() > 1 / output.size + 0.02


def test_macs_counted_from_graph():
    # DS-CNN by hand: conv 10x4 (25x5x64 outputs x 40) + 4 x (depthwise 25x5x64x9 + pointwise 25x5x64x64) + dense 64x12.
    expected = 25 * 5 * 64 * 40 + 4 * (25 * 5 * 64 * 9 + 25 * 5 * 64 * 64) + 64 * 12
    assert mt.count_macs(mt.build("kws_ds_cnn")) == expected
    assert 12_000_000 < mt.count_macs(mt.build("ic_resnet8")) < 13_000_000


def test_tf_same_padding_puts_the_odd_pixel_at_the_end():
    assert mt.same_pads(49, 10, 2) == (4, 5)
    assert mt.same_pads(32, 3, 2) == (0, 1)
    assert mt.same_pads(32, 1, 2) == (0, 0)
    assert mt.same_pads(12, 3, 1) == (1, 1)


def test_sample_input_is_seeded_float32():
    x = mt.sample_input("ic_resnet8")
    assert x.dtype == np.float32 and x.shape == (1, 3, 32, 32)
    assert np.array_equal(x, mt.sample_input("ic_resnet8"))
    assert not np.array_equal(x, mt.sample_input("ic_resnet8", seed=1))


def test_model_path_builds_into_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    path = mt.model_path("kws_ds_cnn", seed=3)
    assert path.is_relative_to(tmp_path) and "seed3" in path.name
    assert path.read_bytes() == mt.build("kws_ds_cnn", seed=3).SerializeToString()
    mtime = path.stat().st_mtime_ns
    assert mt.model_path("kws_ds_cnn", seed=3) == path and path.stat().st_mtime_ns == mtime


def test_unknown_model_is_a_clear_error():
    with pytest.raises(KeyError, match="kws_ds_cnn"):
        mt.build("resnet50")
