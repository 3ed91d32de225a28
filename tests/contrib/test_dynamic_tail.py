"""Data-dependent shapes through the onnxruntime fallback: a detection-style
model whose `NonZero` -> `Gather` tail runs in onnxruntime after the compiled
graph, through the Python API, an exported library and the CLI."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import tessera
from tessera.cli import main
from tessera.errors import ConversionError, TesseraError
from tessera.frontend import from_onnx
from tessera.frontend.onnx.dynamic_tail import TAIL_SYMBOL
from tessera.relay.expr import Call
from tessera.relay.visitor import post_order
from tessera.runtime.output_stage import DYNAMIC_TAIL_ATTR
from tessera.testing.models import ort_run

RNG = np.random.default_rng(5)


def detector() -> onnx.ModelProto:
    """Conv head -> per-position score and box -> threshold -> NonZero -> Gather the kept ones."""
    inits = [nh.from_array(RNG.standard_normal((5, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
             nh.from_array(RNG.standard_normal(5).astype(np.float32) * 0.1, "b"),
             nh.from_array(np.array([1, 5, 64], np.int64), "flat"),
             nh.from_array(np.array([1, 4], np.int64), "sizes"),
             nh.from_array(np.array([-1], np.int64), "minus1"),
             nh.from_array(np.array([0.5], np.float32), "threshold")]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["feat"], pads=[1, 1, 1, 1], name="head"),
        helper.make_node("Reshape", ["feat", "flat"], ["flat_feat"], name="flatten"),
        helper.make_node("Split", ["flat_feat", "sizes"], ["logit", "box_rows"], axis=1, name="split"),
        helper.make_node("Sigmoid", ["logit"], ["score_row"], name="sigmoid"),
        helper.make_node("Reshape", ["score_row", "minus1"], ["scores"], name="scores"),
        helper.make_node("Transpose", ["box_rows"], ["box_cols"], perm=[0, 2, 1], name="boxes_t"),
        helper.make_node("Squeeze", ["box_cols"], ["boxes"], name="boxes"),
        helper.make_node("Greater", ["scores", "threshold"], ["keep"], name="keep"),
        helper.make_node("NonZero", ["keep"], ["nz"], name="nonzero"),
        helper.make_node("Reshape", ["nz", "minus1"], ["idx"], name="indices"),
        helper.make_node("Gather", ["scores", "idx"], ["kept_scores"], axis=0, name="gather_scores"),
        helper.make_node("Gather", ["boxes", "idx"], ["kept_boxes"], axis=0, name="gather_boxes"),
    ]
    graph = helper.make_graph(
        nodes, "detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [64]),
         helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, ["K", 4]),
         helper.make_tensor_value_info("kept_scores", TensorProto.FLOAT, ["K"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _assert_matches(ours: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert [a.shape for a in ours] == [b.shape for b in expected]
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_nonzero_and_what_follows_run_in_onnxruntime_the_rest_in_c(tmp_path):
    model = detector()
    mod, params = from_onnx(model, opaque_unsupported=True)
    tail = mod["main"].attrs.extra[DYNAMIC_TAIL_ATTR]
    tail_model = onnx.ModelProto()
    tail_model.ParseFromString(tail.module.models[TAIL_SYMBOL])
    assert [n.op_type for n in tail_model.graph.node] == ["NonZero", "Reshape", "Gather", "Gather"]
    # tessera compiles the head up to the threshold, with no opaque node left
    ops = {e.op.name for e in post_order(mod["main"].body) if isinstance(e, Call)}
    assert "onnx.opaque" not in ops and {"nn.conv2d", "sigmoid", "greater"} <= ops
    assert [i.name for i in tail_model.graph.input] == ["keep", "scores", "boxes"]

    lib = tessera.build(mod, target="onnxruntime", params=params)
    counts = set()
    for seed in (1, 2, 3):  # a different number of detections each time
        x = _image(seed)
        expected = ort_run(model, {"x": x})
        _assert_matches(lib(x), expected)
        counts.add(expected[2].shape[0])
    assert len(counts) > 1

    loaded = tessera.load_module(lib.export_library(tmp_path / "detector.so"))
    gm = tessera.GraphModule(loaded)
    x = _image(4)
    gm.set_input("x", x)
    gm.run()
    assert gm.num_outputs == 3
    _assert_matches([gm.get_output(k) for k in range(3)], ort_run(model, {"x": x}))


def test_cli_compiles_and_checks_the_detector(tmp_path, capsys):
    path = tmp_path / "detector.onnx"
    onnx.save(detector(), path)
    so = tmp_path / "detector.so"
    assert main(["compile", str(path), "-t", "onnxruntime", "-o", str(so)]) == 0
    said = capsys.readouterr()
    assert "run after the graph, in onnxruntime: NonZero, Reshape, Gather, Gather" in said.out + said.err
    assert main(["run", str(so), "--check", "--compare-onnx", str(path), "-q"]) == 0
    assert main(["run", str(path), "-t", "onnxruntime", "--check", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.count("CHECK OK") == 2


def test_without_the_fallback_nonzero_names_the_node_and_the_option():
    with pytest.raises(ConversionError, match=r"node 'nonzero' \(NonZero\): its output shape depends on the input "
                                              r"values.*-t onnxruntime"):
        from_onnx(detector())


def test_cli_without_the_fallback_suggests_it(tmp_path, capsys):
    path = tmp_path / "detector.onnx"
    onnx.save(detector(), path)
    assert main(["compile", str(path), "-o", str(tmp_path / "d.so"), "-q"]) != 0
    assert "node 'nonzero' (NonZero)" in capsys.readouterr().err


def test_the_aot_executor_refuses_a_dynamic_tail():
    mod, params = from_onnx(detector(), opaque_unsupported=True)
    with pytest.raises(TesseraError, match="data-dependent output shape.*only the graph executor"):
        tessera.build(mod, target="onnxruntime", params=params, executor="aot")


def test_a_damaged_output_stage_is_an_artifact_error():
    from tessera.errors import ArtifactError
    from tessera.runtime.output_stage import OutputStage

    stage = OutputStage(TAIL_SYMBOL, (1, 2), (("graph", 0), ("stage", 1)))
    assert OutputStage.from_bytes(stage.to_bytes(), "x") == stage
    with pytest.raises(ArtifactError, match="lib.so: the output stage cannot be read"):
        OutputStage.from_bytes(b'{"function": "f"}', "lib.so")
    with pytest.raises(ArtifactError, match=r"reads graph outputs \[2\], the graph has 2"):
        stage.check(2, "lib.so")
    with pytest.raises(ValueError, match="output source 'elsewhere'"):
        OutputStage(TAIL_SYMBOL, (), (("elsewhere", 0),))
