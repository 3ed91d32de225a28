"""The partition report as a user sees it: rendered by headless Chromium.

These tests need Chromium, its driver (Debian chromium, chromium-driver) and
selenium (the test extra); scripts/setup.sh installs them. Without them the
tests fail, saying so: they are the report's acceptance test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.backend.report import HOST, partition_report
from tessera.cli import main
from tessera.frontend import from_onnx
from tessera.testing.browser import BrowserMissing, console_errors, graph_size, graph_text, headless_chromium
from tessera.testing.models import light_path

from .test_report_graph import HOSTILE, convs_then_depthwise, fused

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
TWO_PIECES = "little: c -march=x86-64 -memory=sram; big: c -memory=dram"
MAX_ASPECT = 8  # neither side of the graph more than 8 times the other


@pytest.fixture(scope="module")
def browser():
    try:
        with headless_chromium() as driver:
            yield driver
    except BrowserMissing as err:
        pytest.fail(str(err))


def _load(browser, page: Path) -> None:
    browser.get_log("browser")  # forget the previous page's messages
    browser.get(page.resolve().as_uri())
    assert console_errors(browser) == []


def _check_readable(browser) -> None:
    width, height = graph_size(browser)
    assert height / width < MAX_ASPECT and width / height < MAX_ASPECT, (width, height)
    # the graph fits the window: the page never scrolls sideways
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth;")


@pytest.mark.usefixtures("blas_beside_host_gemm")
@pytest.mark.parametrize("name", ["densenet121", "inception_v2"])
def test_large_blas_reports_render_readably(browser, tmp_path, name):
    mod, params = from_onnx(str(light_path(name)))
    report = partition_report(fused(mod, "blas", params))
    page = tmp_path / "report.html"
    page.write_text(report.html(f"{name} for blas"))
    _load(browser, page)
    _check_readable(browser)
    text = graph_text(browser)
    partitions = [k.name for k in report.kernels if k.partition]
    assert len(partitions) > 20
    assert [p for p in partitions if p not in text] == []
    assert "blas" in text and "host" in text
    # the tables: one row per partition, and why the rest stayed
    rows = browser.execute_script("return document.querySelectorAll('#partitions tr').length;")
    assert rows == len(partitions) + 1
    assert "no pattern or operator rule of blas takes concatenate" in browser.page_source


def test_named_two_piece_report_from_the_command_line(browser, tmp_path):
    page = tmp_path / "placement.html"
    assert main(["compile", str(DIGITS), "-o", str(tmp_path / "digits.so"), "-t", TWO_PIECES,
                 "--report", str(page), "-q"]) == 0
    _load(browser, page)
    _check_readable(browser)
    text = graph_text(browser)
    assert "little" in text and "big" in text
    # every kernel box is filled with its piece's colour, and both pieces have kernels
    fills = browser.execute_script(
        "return Array.from(document.querySelectorAll('#viewport g.node title'))"
        ".filter(t => /^k\\d+$/.test(t.textContent))"
        ".map(t => t.parentNode.querySelector('path, polygon').getAttribute('fill'));")
    legend = browser.execute_script(
        "return Array.from(document.querySelectorAll('.swatch')).map(s => s.textContent);")
    assert sorted(legend) == ["big", "little"]
    assert len(set(fills)) == 2


def test_pan_and_zoom(browser, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(partition_report(fused(convs_then_depthwise(), "blas")).html())
    _load(browser, page)
    full = graph_size(browser)
    browser.execute_script(
        "var box = document.getElementById('viewport'), r = box.getBoundingClientRect();"
        "box.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: r.left + 10, clientY: r.top + 10,"
        " bubbles: true, cancelable: true}));")
    zoomed = graph_size(browser)
    assert zoomed[0] == pytest.approx(full[0] * 0.8) and zoomed[1] == pytest.approx(full[1] * 0.8)
    browser.find_element("id", "zoom-out").click()
    browser.find_element("id", "zoom-out").click()
    assert graph_size(browser)[0] > full[0]
    browser.find_element("id", "zoom-fit").click()
    assert graph_size(browser) == pytest.approx(full)
    assert console_errors(browser) == []


def test_hostile_names_stay_text_in_the_browser(browser, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(partition_report(fused(convs_then_depthwise(HOSTILE), "blas")).html(title=HOSTILE))
    _load(browser, page)  # an injected script would have raised an alert and failed here
    assert browser.title == HOSTILE
    assert f"input {HOSTILE}" in graph_text(browser)
    assert browser.execute_script("return document.scripts.length;") == 1
    assert HOST in graph_text(browser)
