"""The ConvNeXt-T block of the latency benchmark (tessera.testing.convnext): a valid model that tessera runs
like onnxruntime, residual branch included."""

from __future__ import annotations

import numpy as np
import onnx

import tessera
from tessera.frontend import from_onnx
from tessera.testing.convnext import INPUT_SHAPE, convnext_block
from tessera.testing.models import ort_run, seeded_input


def test_full_size_block_is_a_valid_model_of_the_stage_1_shape() -> None:
    model = convnext_block()
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert ops[:3] == ["Conv", "Transpose", "LayerNormalization"] and "Erf" in ops and ops[-1] == "Add"
    shape = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert tuple(shape) == INPUT_SHAPE == (1, 96, 56, 56)


def test_small_block_matches_onnxruntime() -> None:
    model = convnext_block(channels=16, size=9)
    x = seeded_input((1, 16, 9, 9), seed=2)
    mod, params = from_onnx(model)
    out = tessera.build(mod, params=params)(x)[0]
    ref = ort_run(model, {"x": x})[0]
    # compare the residual branch (layer scale x MLP), not only its sum with the input, which dominates
    branch, ref_branch = out - x, ref - x
    assert np.abs(ref_branch).max() > 0.05
    np.testing.assert_allclose(branch, ref_branch, rtol=1e-4, atol=1e-5)
