"""The nine real-model cases of onnx/backend/test/data/light.

1. With their own (constant-filled) weights, against the outputs stored in
   the onnx wheel, fed the input onnx's own test runner generates.
2. Because constant weights make most stored outputs a uniform softmax that
   a wrong compiler could still hit, again with seeded random weights
   against onnxruntime on the same input, comparing the outputs and the
   pre-softmax logits (rtol 1e-3, atol 1e-4).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.backend.test.runner import Runner

from tessera.frontend.onnx.backend import TesseraBackend
from tessera.testing.models import (
    LIGHT_MODELS, data_input, light_path, logits_name, ort_run, seeded_input, stored_output, with_output,
)
from tessera.testing.weights import randomize_weights

from .harness import assert_outputs_match


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_stored_output(name, record_property):
    record_property("suite", "light models, stored outputs")
    model = onnx.load(light_path(name))
    inits = {i.name for i in model.graph.initializer}
    inputs = [Runner.generate_dummy_data(vi, seed=0, name=name, random=False)
              for vi in model.graph.input if vi.name not in inits]
    outputs = TesseraBackend.prepare(model).run(inputs)
    assert_outputs_match([stored_output(name)], list(outputs[:1]), rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_random_weights(name, record_property):
    record_property("suite", "light models, random weights vs onnxruntime")
    model = randomize_weights(onnx.load(light_path(name)), seed=0)
    model = with_output(model, logits_name(model))
    input_name, shape = data_input(model)
    x = seeded_input(shape, seed=1)
    expected = ort_run(model, {input_name: x})
    actual = TesseraBackend.prepare(model).run([x])
    # the logits must carry signal, or the comparison would prove little
    assert float(np.std(expected[-1])) > 0.1
    assert_outputs_match(expected, list(actual), rtol=1e-3, atol=1e-4)
