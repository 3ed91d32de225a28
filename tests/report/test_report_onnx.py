"""`--report FILE.onnx`: the partitioned graph as ONNX, each node annotated with its target (for Netron)."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from tessera.backend.report import partition_report
from tessera.backend.report_onnx import report_onnx
from tessera.cli import main

from .test_report_graph import convs_then_depthwise, fused

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits" / "digits_cnn.onnx"


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def test_every_box_is_a_node_naming_its_target(blas_takes_small_gemms):
    report = partition_report(fused(convs_then_depthwise(), "blas"))
    model = report_onnx(report)
    onnx.checker.check_model(model)
    nodes = model.graph.node
    assert [(n.op_type, n.domain, _attrs(n)["kernel"]) for n in nodes] == [
        ("blas.conv2d", "tessera.blas", b"tsgen_default_blas_0"),
        ("blas.conv2d", "tessera.blas", b"tsgen_default_blas_0"),
        ("nn.conv2d+nn.relu", "tessera.host", b"kernel_1"),
    ]
    assert [{p.key: p.value for p in n.metadata_props}["target"] for n in nodes] == ["blas", "blas", "host"]
    assert _attrs(nodes[2])["constants"] == [b"16x1x3x3 float32"]
    # the edges: the model input feeds the first conv, each call the next
    assert [list(n.input) for n in nodes] == [["x"], ["k0m0"], ["k0m1"]]
    assert [i.name for i in model.graph.input] == ["x"] and [o.name for o in model.graph.output] == ["k1"]
    shape = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert shape == [1, 16, 12, 12]


def test_cli_writes_onnx_when_the_report_is_named_so(tmp_path, capsys, blas_takes_small_gemms):
    out = tmp_path / "placement.onnx"
    assert main(["compile", str(DIGITS), "-o", str(tmp_path / "d.so"), "-t", "blas", "--report", str(out), "-q"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    targets = [{p.key: p.value for p in n.metadata_props}["target"] for n in model.graph.node]
    assert targets.count("blas") == 3 and "host" in targets  # 2 convolutions and the matmul on blas
