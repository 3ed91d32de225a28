"""The memory chart (`tessera compile --memory-report`), read back as XML: axes, legend, peak, lanes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.backend.memory_chart import byte_ticks, common_prefix, esc, label_stride
from tessera.backend.memory_plan import PoolSpec
from tessera.backend.memory_report import BufferKind, human_bytes, memory_report
from tessera.backend.program_memory import MemoryOptions
from tessera.cli import main as cli
from tessera.op import elemwise as ew
from tessera.op.annotation import on_target
from tessera.op import transform as tf
from tessera.op.nn import conv, pool
from tessera.relay.module import IRModule
from tessera.transform.pass_infra import PassContext

NS = {"s": "http://www.w3.org/2000/svg"}
SHAPE = (1, 4, 8, 8)  # float32: 1 KiB per tensor


def _text(element: ET.Element) -> str:
    return "".join(element.itertext())


def _in_place_model() -> IRModule:
    """transpose -> (transpose, relu): relu writes over the first transpose's result, which dies there."""
    x = relay.Var("x", relay.TensorType(SHAPE, "float32"))
    t = tf.transpose(x, axes=(0, 1, 3, 2))
    return IRModule.from_expr(relay.Function((x,), relay.Tuple((tf.transpose(t, axes=(0, 2, 1, 3)), ew.relu(t)))))


def _conv_model(pin_last: str | None = None) -> IRModule:
    """conv -> pool -> conv: kernels with scratch (padded inputs); `pin_last`: the piece of the last conv."""
    rng = np.random.default_rng(0)
    x = relay.Var("x", relay.TensorType((1, 3, 12, 12), "float32"))
    w1 = relay.const(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    w2 = relay.const(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
    c = conv.conv2d(x, w1, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    p = pool.max_pool2d(c, kernel=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1))
    out = conv.conv2d(p, w2, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    if pin_last:
        out = on_target(out, pin_last)
    return IRModule.from_expr(relay.Function((x,), ew.relu(out)))


def _svg(report, title: str = "chart") -> ET.Element:
    return ET.fromstring(report.svg(title))


def test_the_graph_executor_chart_has_axes_legend_peak_and_lower_bound():
    lib = tessera.build(_in_place_model())
    report = memory_report(lib)
    # the plan this model must get: relu's result shares the first transpose's buffer, and the
    # graph executor keeps both results to the end, so two 1 KiB buffers are alive at the peak
    assert report.memory.inplace == 1 and report.memory.lower_bound == 2048
    root = _svg(report)
    lanes = root.findall(".//s:g[@class='lane']", NS)
    assert [lane.get("data-pool") for lane in lanes] == ["pool"]
    lane = lanes[0]
    assert "pool 'pool' (lane 1 of 1)" in _text(lane.find("s:text[@class='lane-label']", NS))
    y_ticks = [_text(t.find("s:text", NS)) for t in lane.findall("s:g[@class='y-axis']/s:g[@class='tick']", NS)]
    assert y_ticks == ["0 KiB", "0.5 KiB", "1 KiB", "1.5 KiB", "2 KiB"]
    x_ticks = [t.get("data-step") for t in lane.findall("s:g[@class='x-axis']/s:g[@class='tick']", NS)]
    assert x_ticks == ["0", "1", "2"]
    kernels = [_text(t) for t in root.findall(".//s:text[@class='kernel-label']", NS)]
    assert len(kernels) == 3 and kernels[0].startswith("0 ") and "transpose" in kernels[0]
    assert "relu" in " ".join(kernels)
    legend = {_text(e).strip(): e.get("data-kind") for e in root.findall(".//s:g[@class='legend-entry']", NS)}
    assert legend == {"result tensor": "result", "scratch (kernel workspace)": "scratch",
                      "in-place reuse (tensors sharing one buffer)": "in-place",
                      "concatenation (its parts computed in it)": "concatenation",
                      "lower bound (most bytes alive at once)": "lower-bound",
                      "peak (labelled with the tensors alive)": "peak"}
    bound = lane.find("s:g[@class='lower-bound']", NS)
    assert bound.get("data-bytes") == "2048" and _text(bound) == "lower bound 2 KiB"
    peak = lane.find("s:g[@class='peak']", NS)
    assert peak.get("data-bytes") == "2048"
    alive = _text(peak.find("s:text[@class='peak-alive']", NS))
    in_place = next(b for b in report.lanes[0].buffers if b.kind is BufferKind.IN_PLACE)
    assert [t.name for t in in_place.tensors] == ["t0", "t2"]  # the transpose's result, then relu's over it
    assert alive.startswith("alive: ") and "t0+t2 1 KiB" in alive and "t1 1 KiB" in alive
    kinds = sorted(r.get("class") for r in lane.findall(".//s:rect[@class]", NS) if "buffer" in r.get("class"))
    assert kinds == ["buffer in-place", "buffer result"]
    assert "pool pool" not in report.svg()


def test_aot_pools_get_one_lane_each_and_scratch_is_drawn_as_scratch():
    with PassContext(config={"memory": MemoryOptions(pools=(PoolSpec("sram", 4096), PoolSpec("dram")))}):
        lib = tessera.build(_conv_model(), executor="aot", mod_name="cv")
    report = memory_report(lib)
    root = _svg(report)
    lanes = root.findall(".//s:g[@class='lane']", NS)
    assert [lane.get("data-pool") for lane in lanes] == ["sram", "dram"]
    for lane, pool in zip(lanes, lib.program.pools):
        assert lane.get("data-size") == str(pool.size)
        drawn = lane.findall("s:g[@class='buffers']/s:rect", NS)
        assert len(drawn) == len(pool.plan.buffers)
        assert lane.find("s:g[@class='peak']", NS) is not None
    assert "limit 4 KiB" in _text(lanes[0].find("s:text[@class='lane-label']", NS))
    assert root.findall(".//s:rect[@class='buffer scratch']", NS)
    assert report.svg("chart") == memory_report(lib).svg("chart")  # deterministic


def test_a_named_compilation_shows_which_piece_runs_each_step():
    lib = tessera.build(_conv_model(pin_last="big"), target="little: c -march=x86-64; big: c", executor="aot",
                        mod_name="cv", ctx=PassContext(config={"device_policy": "host_first"}))
    report = memory_report(lib)
    strip = _svg(report).findall(".//s:g[@class='pieces']/s:rect", NS)
    assert [r.get("data-piece") for r in strip] == list(report.pieces)
    assert report.pieces[0] == "little" and "big" in report.pieces
    text = report.text()
    assert "piece little:" in text and "piece big:" in text


def test_text_in_the_chart_is_escaped():
    lib = tessera.build(_in_place_model(), executor="aot", mod_name="ip")
    title = 'model <script>alert("x")</script> & co\x01'
    root = _svg(memory_report(lib), title)  # parses: nothing leaked into the markup
    assert _text(root.find("s:text[@class='title']", NS)) == title.replace("\x01", "\ufffd")
    assert root.find(".//s:script", NS) is None
    assert esc("a\"b<c>&") == "a&quot;b&lt;c&gt;&amp;"


def test_cli_memory_report_for_a_named_compilation(tmp_path, capsys):
    from tessera.testing import mlperf_tiny

    model = mlperf_tiny.model_path("kws_ds_cnn")
    svg = tmp_path / "mem.svg"
    assert cli(["compile", str(model), "-t", "host: c; dsp: c -mcpu=cortex-m7", "-o", str(tmp_path / "kws.tar"),
                "--memory-report", str(svg), "-q"]) == 0
    assert "peak" in capsys.readouterr().out
    root = ET.parse(svg).getroot()
    assert len(root.findall(".//s:g[@class='lane']", NS)) == 1
    assert root.findall(".//s:g[@class='pieces']/s:rect", NS)


def test_helpers():
    assert byte_ticks(1000) == [(v, f"{v} B") for v in (0, 200, 400, 600, 800, 1000)]
    assert [label for _, label in byte_ticks(3 * 1024 * 1024 + 5)] == ["0 MiB", "1 MiB", "2 MiB", "3 MiB"]
    assert [label for _, label in byte_ticks(8830976)] == [f"{v} MiB" for v in (0, 2, 4, 6, 8)]
    assert label_stride(10, 1000) == 1 and label_stride(241, 1600) == 5  # 6.6 px a step: one label in five
    assert common_prefix(["tsgen_m_fused_conv2d", "tsgen_m_fused_add"]) == "tsgen_m_fused_"
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(100) == "100 B"


@pytest.mark.parametrize("steps", [3, 40, 241, 1200])
def test_kernel_labels_never_overlap(steps):
    plot = float(min(max(steps * 8, 720), 1600))
    assert label_stride(steps, plot) * plot / steps >= 15


def test_the_chart_in_the_docs_has_axes_legend_and_a_labelled_peak():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    assert "](memory-densenet121.svg)" in (docs / "memory-planning.md").read_text()
    root = ET.parse(docs / "memory-densenet121.svg").getroot()
    assert "light_densenet121.onnx" in _text(root.find("s:text[@class='title']", NS))
    lanes = root.findall(".//s:g[@class='lane']", NS)
    assert len(lanes) == 1
    assert len(lanes[0].findall("s:g[@class='y-axis']/s:g[@class='tick']", NS)) >= 3
    assert [t.get("data-step") for t in lanes[0].findall("s:g[@class='x-axis']/s:g[@class='tick']", NS)][:3] == \
        ["0", "5", "10"]
    assert len(root.findall(".//s:g[@class='legend-entry']", NS)) == 6
    assert root.findall(".//s:rect[@class='buffer concatenation']", NS)  # its growing feature maps
    peak = lanes[0].find("s:g[@class='peak']", NS)
    assert _text(peak.find("s:text[@class='peak-label']", NS)).startswith("peak 6.89 MiB alive at step")
    assert _text(lanes[0].find("s:g[@class='lower-bound']", NS)).startswith("lower bound")


def test_cli_memory_report_for_the_graph_executor(tmp_path, capsys):
    from pathlib import Path

    digits = Path(__file__).resolve().parents[2] / "examples" / "digits" / "digits_cnn.onnx"
    svg = tmp_path / "charts" / "digits.svg"
    assert cli(["compile", str(digits), "-o", str(tmp_path / "d.so"), "--memory-report", str(svg), "-q"]) == 0
    out = capsys.readouterr().out
    assert "peak" in out and f"wrote {svg}" in out
    root = ET.parse(svg).getroot()
    (lane,) = root.findall(".//s:g[@class='lane']", NS)
    assert lane.find("s:g[@class='peak']", NS) is not None and lane.find("s:g[@class='lower-bound']", NS) is not None
    assert "digits_cnn.onnx" in _text(root.find("s:text[@class='title']", NS))
