"""The partition report as one self-contained HTML page.

The page holds the summary, the graph (the SVG Graphviz drew, inline, with
a few lines of script for wheel zoom, drag to pan and a fit button: no
network, no library), a table of the accelerator partitions and a table
of what stayed on the host and why. Every name in it is escaped: node and
input names come from the user's model.
"""

from __future__ import annotations

import html
from collections import Counter

from .report import HOST, KernelNode, PartitionReport
from .report_graph import render_svg

MAX_KERNELS_LISTED = 8  # kernel names per row of the host table

STYLE = """
body { font-family: sans-serif; margin: 1em 2em; color: #222; }
#viewport { border: 1px solid #bbb; height: 80vh; overflow: hidden; cursor: grab; background: #fff; }
#viewport svg { width: 100%; height: 100%; display: block; }
#viewport.dragging { cursor: grabbing; }
#controls button { margin-right: 4px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.swatch { padding: 2px 8px; margin-right: 6px; border: 1px solid #888; }
"""

# Pan and zoom by rewriting the SVG's viewBox: the drawing stays vector-sharp at every zoom.
PAN_ZOOM = """
(function () {
  var box = document.getElementById("viewport");
  var svg = box.querySelector("svg");
  if (!svg) { return; }
  var base = svg.viewBox.baseVal;
  var full = { x: base.x, y: base.y, w: base.width, h: base.height };
  var view = { x: full.x, y: full.y, w: full.w, h: full.h };
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  function show() { svg.setAttribute("viewBox", view.x + " " + view.y + " " + view.w + " " + view.h); }
  function unitsPerPixel() { return Math.max(view.w / box.clientWidth, view.h / box.clientHeight); }
  function zoom(factor, px, py) {
    var r = box.getBoundingClientRect(), u = unitsPerPixel();
    var cx = view.x + view.w / 2 + (px - r.left - r.width / 2) * u;
    var cy = view.y + view.h / 2 + (py - r.top - r.height / 2) * u;
    view.x = cx - (cx - view.x) * factor; view.y = cy - (cy - view.y) * factor;
    view.w *= factor; view.h *= factor; show();
  }
  box.addEventListener("wheel", function (e) {
    e.preventDefault(); zoom(e.deltaY < 0 ? 0.8 : 1.25, e.clientX, e.clientY);
  }, { passive: false });
  var drag = null;
  box.addEventListener("mousedown", function (e) {
    drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, u: unitsPerPixel() };
    box.classList.add("dragging");
  });
  window.addEventListener("mousemove", function (e) {
    if (!drag) { return; }
    view.x = drag.vx - (e.clientX - drag.x) * drag.u; view.y = drag.vy - (e.clientY - drag.y) * drag.u; show();
  });
  window.addEventListener("mouseup", function () { drag = null; box.classList.remove("dragging"); });
  function centre() { var r = box.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }
  document.getElementById("zoom-in").onclick = function () { var c = centre(); zoom(0.8, c[0], c[1]); };
  document.getElementById("zoom-out").onclick = function () { var c = centre(); zoom(1.25, c[0], c[1]); };
  document.getElementById("zoom-fit").onclick = function () {
    view = { x: full.x, y: full.y, w: full.w, h: full.h }; show();
  };
  show();
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _op_summary(ops: list[str]) -> str:
    return ", ".join(f"{n}&times; {_e(op)}" if n > 1 else _e(op) for op, n in Counter(ops).most_common())


def _partition_table(report: PartitionReport) -> str:
    parts = [k for k in report.kernels if k.partition]
    if not parts:
        return "<p>No accelerator partitions: every operator runs in a kernel of the default flow.</p>"
    rows = [f"<tr><td>{_e(k.name)}</td><td>{_e(k.target)}</td><td>{_op_summary(k.ops)}</td>"
            f"<td>{'<br>'.join(_e(m.name + ': ' + ' + '.join(m.ops)) for m in k.members)}</td></tr>" for k in parts]
    return ("<table id='partitions'><tr><th>partition</th><th>target</th><th>operators</th><th>calls inside</th></tr>"
            + "".join(rows) + "</table>")


def _stay_reasons(report: PartitionReport, kernels: list[KernelNode]) -> dict[tuple[str, str, str, str], list[str]]:
    """(operator, where it runs, declining target, reason) -> the kernels holding such calls."""
    found: dict[tuple[str, str, str, str], list[str]] = {}
    unnoted = "no accelerator in this build" if not report.declined else "no accelerator was offered it"
    for k in kernels:
        explained = set()
        for op, target, reason in report.reasons(k):
            found.setdefault((op, k.target, target, reason), []).append(k.name)
            explained.add(op)
        for op in dict.fromkeys(k.ops):
            if op not in explained:
                found.setdefault((op, k.target, "", unnoted), []).append(k.name)
    return found


def _host_table(report: PartitionReport) -> str:
    kernels = [k for k in report.kernels if not k.partition]
    if not kernels:
        return "<p>Nothing stayed on the host.</p>"
    rows = []
    for (op, where, target, reason), names in sorted(_stay_reasons(report, kernels).items(),
                                                     key=lambda kv: (-len(kv[1]), kv[0])):
        listed = ", ".join(_e(n) for n in names[:MAX_KERNELS_LISTED])
        more = f" and {len(names) - MAX_KERNELS_LISTED} more" if len(names) > MAX_KERNELS_LISTED else ""
        rows.append(f"<tr><td>{_e(op)}</td><td>{_e(where)}</td><td>{len(names)}</td>"
                    f"<td>{_e(target) or '&mdash;'}</td><td>{_e(reason)}</td><td>{listed}{more}</td></tr>")
    pieces = Counter(k.target for k in kernels)
    where = ", ".join(f"{n} on {_e(t)}" for t, n in pieces.most_common())
    return (f"<p>{len(kernels)} kernels of the default flow ({where}).</p>"
            "<table id='host'><tr><th>operator</th><th>runs on</th><th>kernels</th><th>declined by</th>"
            "<th>why</th><th>in kernels</th></tr>" + "".join(rows) + "</table>")


def report_page(report: PartitionReport, title: str) -> str:
    dot = report.dot()
    svg = render_svg(dot)
    # the hint only where the layout cut the graph into columns (report_graph frees crossing edges)
    columns = "; dashed edges continue in the next column" if "constraint=false" in dot else ""
    legend = " ".join(f'<span class="swatch" style="background:{_e(c)}">{_e(t if t != HOST else "host")}</span>'
                      for t, c in report.colours().items())
    return "\n".join([
        "<!doctype html>",
        f"<html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{STYLE}</style></head>",
        f"<body><h1>{_e(title)}</h1>",
        f"<p>{legend}</p>",
        f"<pre>{_e(report.text())}</pre>",
        "<h2>Graph</h2>",
        "<p id='controls'><button id='zoom-in'>+</button><button id='zoom-out'>&minus;</button>"
        f"<button id='zoom-fit'>fit</button> wheel to zoom, drag to pan{columns}</p>",
        f"<div id='viewport'>{svg}</div>",
        "<h2>Partitions</h2>",
        _partition_table(report),
        "<h2>What stayed on the host, and why</h2>" if report.declined else "<h2>Kernels of the default flow</h2>",
        _host_table(report),
        f"<script>{PAN_ZOOM}</script>",
        "</body></html>",
        "",
    ])
