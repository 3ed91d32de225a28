"""The partition report's graph: what Graphviz is asked to draw, and what comes back (no browser here)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tessera import relay
from tessera.backend import report_graph
from tessera.backend.build_module import fuse, resolve_target
from tessera.backend.report import partition_report
from tessera.errors import TesseraError
from tessera.op import elemwise as ew
from tessera.op.nn import conv
from tessera.transform.declines import declined
from tessera.transform.pass_infra import PassContext

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '</text><script>alert("x")</script>&amp; \\N "q" \\'


def _const(*shape: int) -> relay.Expr:
    return relay.const(np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32))


def convs_then_depthwise(input_name: str = "x") -> relay.IRModule:
    """Two convolutions blas takes (merged into one partition), then a depthwise one it refuses."""
    x = relay.Var(input_name, relay.TensorType((1, 8, 12, 12), "float32"))
    pad1 = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    y = ew.relu(conv.conv2d(x, _const(16, 8, 3, 3), **pad1))
    y = conv.conv2d(y, _const(16, 16, 1, 1), strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    y = conv.conv2d(y, _const(16, 1, 3, 3), groups=16, **pad1)
    return relay.IRModule.from_expr(relay.Function((x,), ew.relu(y)))


def fused(mod: relay.IRModule, target: str, params: dict | None = None) -> relay.IRModule:
    """The module as `tessera.build` partitions and fuses it (no C is generated)."""
    compile_target, config = resolve_target(target)
    return fuse(mod, compile_target, params, PassContext.current(), lambda msg: None, "default", config)


def test_a_partition_is_a_cluster_showing_each_of_its_convolutions(blas_takes_small_gemms):
    report = partition_report(fused(convs_then_depthwise(), "blas"))
    (part,) = [k for k in report.kernels if k.partition]
    assert [m.name for m in part.members] == ["blas.conv2d", "blas.conv2d"]
    assert [m.ops for m in part.members] == [["nn.conv2d", "nn.relu"], ["nn.conv2d"]]
    dot = report.dot()
    cluster = dot[dot.index(f"subgraph {part.node_id} {{"):]
    cluster = cluster[:cluster.index("  }")]
    assert part.name in cluster and cluster.count("blas.conv2d") == 2
    # constants are folded into their reader's label, never drawn as nodes
    assert "const 16x8x3x3" in cluster and "const 16x16x1x1" in cluster
    assert all(t.node_id in ("in0", "out") for t in report.terminals)
    svg = ET.fromstring(report.svg())
    titles = [g.findtext(f"{SVG}title") for g in svg.iter(f"{SVG}g") if g.get("class") == "node"]
    assert {m.node_id for m in part.members} <= set(titles)
    text = " ".join(t.text or "" for t in svg.iter(f"{SVG}text"))
    assert part.name in text and "const 16x1x3x3" in text


def test_edges_have_arrowheads_and_tensor_shapes():
    report = partition_report(fused(convs_then_depthwise(), "blas"))
    svg = ET.fromstring(report.svg())
    edges = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "edge"]
    assert len(edges) == len(report.edges) >= 4
    assert all(e.find(f"{SVG}polygon") is not None for e in edges)  # the arrowhead
    labels = {t.text for e in edges for t in e.iter(f"{SVG}text")}
    assert {"1x8x12x12", "1x16x12x12"} <= labels


def test_the_host_table_names_the_check_that_refused_a_call(blas_takes_small_gemms):
    mod = fused(convs_then_depthwise(), "blas")
    notes = [d for d in declined(mod) if d.op == "nn.conv2d"]
    # MergeComposite saw the check refuse the match; AnnotateTarget then found no rule for the bare conv
    assert [(d.target, d.reason) for d in notes] == [
        ("blas", "pattern blas.conv2d: its check _conv_ok refused the match"),
        ("blas", "no pattern or operator rule of blas takes nn.conv2d")]
    assert notes[0].signature == "(1x16x12x12 float32, 16x1x3x3 float32)"
    report = partition_report(mod)
    (depthwise,) = [k for k in report.kernels if not k.partition and "nn.conv2d" in k.ops]
    assert ("nn.conv2d", "blas", "pattern blas.conv2d: its check _conv_ok refused the match") in \
        report.reasons(depthwise)
    # the specific refusal replaces the generic "no rule" note, for the relu of the refused match too
    assert report.reasons(depthwise) == [
        ("nn.conv2d", "blas", "pattern blas.conv2d: its check _conv_ok refused the match"),
        ("nn.relu", "blas", "pattern blas.conv2d: its check _conv_ok refused the match")]
    page = report.html()
    assert "its check _conv_ok refused the match" in page and "<table id='host'>" in page


def test_hostile_names_are_escaped_in_dot_svg_and_html():
    report = partition_report(fused(convs_then_depthwise(HOSTILE), "blas"))
    page = report.html(title=HOSTILE)
    assert page.count("<script>") == 1  # the page's own pan/zoom script, nothing the model named
    svg = ET.fromstring(report.svg())  # still well-formed XML
    assert not [e for e in svg.iter() if e.tag.endswith("script")]
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert f"input {HOSTILE}" in texts  # drawn literally: no DOT escape (\N) was interpreted


def test_deep_graphs_are_set_in_columns():
    # a chain of 200 kernels: one band would be 200 ranks tall
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    y = x
    for k in range(200):
        y = ew.exp(y) if k % 2 else ew.negative(y)
    report = partition_report(relay.IRModule.from_expr(relay.Function((x,), y)))
    assert len(report.kernels) == 200
    crossing = report.dot().count("constraint=false")
    assert crossing >= 3
    svg = ET.fromstring(report.svg())
    _, _, width, height = (float(v) for v in svg.get("viewBox").split())
    assert height / width < 8 and width / height < 8
    assert "dashed edges continue in the next column" in report.html()


def test_a_graph_in_one_column_gets_no_column_hint():
    report = partition_report(fused(convs_then_depthwise(), "blas"))
    assert "constraint=false" not in report.dot()
    page = report.html()
    assert "wheel to zoom, drag to pan</p>" in page and "next column" not in page


def test_a_missing_dot_is_an_error_naming_the_package(monkeypatch):
    monkeypatch.setattr(report_graph.shutil, "which", lambda name: None)
    with pytest.raises(TesseraError, match="Debian package graphviz"):
        report_graph.render_svg("digraph {}")
