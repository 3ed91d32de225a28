#!/usr/bin/env python3
"""Regenerate the screenshots of `tessera compile --report` in docs/.

    .venv/bin/python scripts/report_screenshots.py            # writes docs/report-*.png

Two reports, rendered by headless Chromium as the tests render them
(tests/report/test_report_browser.py):

- DenseNet-121 (the ONNX light model) for `-t blas`: the whole graph, and a
  zoomed-in corner where the labels can be read;
- the digits CNN on two named pieces, `little` and `big`: the whole page.

Needs Graphviz, Chromium and chromium-driver (scripts/setup.sh) and the test
extra (selenium).
"""

from __future__ import annotations

import base64
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tessera.backend.build_module import fuse, resolve_target  # noqa: E402
from tessera.backend.report import PartitionReport, partition_report  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402
from tessera.testing.browser import console_errors, headless_chromium  # noqa: E402
from tessera.testing.models import light_path  # noqa: E402
from tessera.transform.pass_infra import PassContext  # noqa: E402

DOCS = ROOT / "docs"
TWO_PIECES = "little: c -march=x86-64 -memory=sram; big: c -memory=dram"


def report_of(model: Path, target: str) -> PartitionReport:
    """The report `tessera compile MODEL -t TARGET --report` writes (no C compiled: the graph half is enough)."""
    mod, params = from_onnx(str(model))
    compile_target, config = resolve_target(target)
    return partition_report(fuse(mod, compile_target, params, PassContext(), lambda msg: None, "default", config))


def shoot(browser, html: str, out: Path, whole_page: bool = False, zoom_clicks: int = 0) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html)
        browser.get(page.as_uri())
        errors = console_errors(browser)
        if errors:
            raise SystemExit(f"{out.name}: the page logged errors: {errors}")
        box = browser.find_element("id", "viewport")
        if not whole_page:
            browser.execute_script("arguments[0].scrollIntoView();", box)
        for _ in range(zoom_clicks):  # zoom towards the graph's input, where it starts
            browser.execute_script(
                "var box = arguments[0], titles = box.querySelectorAll('g.node title');"
                "var start = Array.from(titles).find(t => t.textContent == 'in0').parentNode;"
                "var r = start.getBoundingClientRect();"
                "box.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: r.left, clientY: r.top,"
                " bubbles: true, cancelable: true}));", box)
        time.sleep(0.2)
        if whole_page:  # the whole document, not just the window (Chromium's DevTools protocol)
            width, height = browser.execute_script(
                "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight];")
            shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
            out.write_bytes(base64.b64decode(shot["data"]))
        else:
            box.screenshot(str(out))
    print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size // 1024} KB)")


def main() -> int:
    densenet = report_of(light_path("densenet121"), "blas").html("tessera: densenet121.onnx for blas")
    named = report_of(ROOT / "examples" / "digits" / "digits_cnn.onnx", TWO_PIECES) \
        .html(f"tessera: digits_cnn.onnx for {TWO_PIECES}")
    with headless_chromium(1280, 1000) as browser:
        shoot(browser, densenet, DOCS / "report-densenet121-blas.png")
        shoot(browser, densenet, DOCS / "report-densenet121-blas-zoom.png", zoom_clicks=7)
    with headless_chromium(1280, 1000) as browser:
        shoot(browser, named, DOCS / "report-named-pieces.png", whole_page=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
