"""The memory report drawn as SVG: one lane per pool, buffers as offset x lifetime rectangles.

Time runs left to right in kernel steps (each split into its kernel's
top-level statements, the ticks of the planner's liveness); bytes run
bottom to top with ticks in B/KiB/MiB. Every lane marks its peak (the tick
where the most bytes are alive, labelled with the largest tensors alive
there) and its lower bound (a labelled dashed line). Kernel names label the
time axis at a stride that keeps them apart; a named compilation also gets a
strip saying which piece runs each step.

The markup carries classes (`lane`, `legend-entry`, `tick`, `peak`,
`lower-bound`, `buffer`) so tests and stylesheets can find the parts. All
text is escaped (tensor, kernel and file names come from user models), and
the output is a pure function of the report: same plan, same bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from .memory_report import BufferKind, ChartBuffer, Lane, MemoryReport, Peak, alive_listing, human_bytes

FILL = {BufferKind.RESULT: "#6baed6", BufferKind.SCRATCH: "#fdae6b", BufferKind.IN_PLACE: "#74c476",
        BufferKind.CONCATENATION: "#9e9ac8"}
EDGE, BOUND, PEAK, AXIS, GRID = "#31597a", "#d62728", "#7b3294", "#444", "#e4e4e4"
PIECE_COLOURS = ("#8dd3c7", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#d9d9d9")

LEFT, RIGHT = 84, 36  # room for the byte labels, and for the last kernel label's tick
PANEL = 240  # plot height of one lane
LANE_HEADER = 58  # the pool's line and the peak's two lines above its plot
LANE_FOOTER = 30  # step numbers under the plot
CHAR = 6.6  # rough width of one 11 px sans-serif character, to keep labels apart
LABEL_CHARS = 40  # kernel labels are cut to this many characters
STRIDES = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000)
UNITS = (("B", 1), ("KiB", 1024), ("MiB", 1024 ** 2), ("GiB", 1024 ** 3))
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def esc(text: object) -> str:
    """`text` safe inside an SVG element or a double-quoted attribute (no markup, no XML-invalid characters)."""
    s = _NOT_XML.sub("\ufffd", str(text))
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def byte_ticks(top: int, most: int = 6) -> list[tuple[int, str]]:
    """Round byte values from 0 to `top` (at most `most` intervals), labelled in one human unit."""
    unit, scale = next(((u, s) for u, s in reversed(UNITS) if top >= s), UNITS[0])
    span = max(top / scale, 1e-9)
    base = 10 ** math.floor(math.log10(span / most))
    step = next(m * base for m in (1, 2, 2.5, 5, 10) if span / (m * base) <= most)
    if unit == "B":
        step = max(step, 1)
    ticks = []
    k = 0
    while k * step <= span * (1 + 1e-9):
        value = k * step
        ticks.append((round(value * scale), f"{value:.4g} {unit}"))
        k += 1
    return ticks


def label_stride(steps: int, plot_width: float, room: float = 15.0) -> int:
    """Every how many steps a (vertical) kernel label fits without touching its neighbour."""
    per_step = plot_width / max(steps, 1)
    return next((s for s in STRIDES if s * per_step >= room), STRIDES[-1])


def common_prefix(names: Sequence[str]) -> str:
    """The longest prefix all kernel names share, up to an underscore (e.g. tsgen_default_)."""
    if len(names) < 2:
        return ""
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:first.rfind("_", 0, n) + 1] if n else ""


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 3] + "..."


class _Canvas:
    """Coordinates of the plots: where a tick and a byte offset land."""

    def __init__(self, report: MemoryReport) -> None:
        self.report = report
        self.ticks = max([report.steps * report.ticks_per_step]
                         + [b.end + 1 for lane in report.lanes for b in lane.buffers] + [1])
        self.plot_width = float(min(max(report.steps * 8, 720), 1600))
        self.width = int(LEFT + self.plot_width + RIGHT)

    def x(self, tick: float) -> float:
        return LEFT + self.plot_width * tick / self.ticks

    def step_x(self, step: int) -> float:
        """The middle of a step."""
        return self.x((step + 0.5) * self.report.ticks_per_step)


def _legend(y: float, width: float) -> tuple[list[str], float]:
    """The legend, wrapped to `width`; returns the markup and its height."""
    entries = [(kind.name.lower().replace("_", "-"), f'<rect width="14" height="10" fill="{FILL[kind]}" '
                f'stroke="{EDGE}" stroke-width="0.5"/>', kind.value) for kind in BufferKind]
    entries.append(("lower-bound", f'<line x1="0" x2="14" y1="5" y2="5" stroke="{BOUND}" stroke-width="1.5" '
                    'stroke-dasharray="4 2"/>', "lower bound (most bytes alive at once)"))
    entries.append(("peak", f'<line x1="7" x2="7" y1="-2" y2="12" stroke="{PEAK}" stroke-width="1.5"/>',
                    "peak (labelled with the tensors alive)"))
    out = [f'<g class="legend" transform="translate({LEFT},{y})">']
    x = row = 0
    for key, mark, label in entries:
        room = int(28 + CHAR * len(label))
        if x and x + room > width:
            x, row = 0, row + 18
        out.append(f'<g class="legend-entry" data-kind="{key}" transform="translate({x},{row})">{mark}'
                   f'<text x="20" y="10">{esc(label)}</text></g>')
        x += room
    out.append("</g>")
    return out, row + 18


def _buffer(c: _Canvas, lane: Lane, b: ChartBuffer, top: float) -> str:
    size = max(lane.size, 1)
    x, w = c.x(b.start), max(c.x(b.end + 1) - c.x(b.start), 0.5)
    y = top + PANEL * (1 - (b.offset + b.size) / size)
    h = max(PANEL * b.size / size, 0.5)
    kernels = c.report.kernels
    held = "; ".join(f"{t.name} ({'scratch of' if t.scratch else 'made by'} step {t.step} {kernels[t.step]})"
                     for t in b.tensors)
    steps = f"steps {c.report.step_of(b.start)}-{c.report.step_of(b.end)}"
    return (f'<rect class="buffer {b.kind.name.lower().replace("_", "-")}" x="{x:.2f}" y="{y:.2f}" '
            f'width="{w:.2f}" height="{h:.2f}" fill="{FILL[b.kind]}" stroke="{EDGE}" stroke-width="0.3">'
            f'<title>{esc(f"{held or b.name}: {human_bytes(b.size)} ({b.size} B) at offset {b.offset}, {steps}")}'
            '</title></rect>')


def _axes(c: _Canvas, lane: Lane, top: float, stride: int) -> list[str]:
    bottom = top + PANEL
    size = max(lane.size, 1)
    out = ['<g class="y-axis">']
    for value, label in byte_ticks(size):
        y = bottom - PANEL * value / size
        out.append(f'<g class="tick" data-bytes="{value}"><line x1="{LEFT}" x2="{LEFT + c.plot_width:.2f}" '
                   f'y1="{y:.2f}" y2="{y:.2f}" stroke="{GRID}"/><line x1="{LEFT - 5}" x2="{LEFT}" y1="{y:.2f}" '
                   f'y2="{y:.2f}" stroke="{AXIS}"/><text x="{LEFT - 8}" y="{y + 4:.2f}" text-anchor="end">'
                   f'{esc(label)}</text></g>')
    out.append(f'<text class="axis-title" transform="translate(14,{top + PANEL / 2:.2f}) rotate(-90)" '
               'text-anchor="middle">offset in pool</text></g>')
    out.append('<g class="x-axis">')
    tps = c.report.ticks_per_step
    for step in range(0, c.report.steps, stride):
        x, start = c.step_x(step), c.x(step * tps)  # the label in the middle, a grid line where the step starts
        out.append(f'<g class="tick" data-step="{step}"><line x1="{start:.2f}" x2="{start:.2f}" y1="{top}" '
                   f'y2="{bottom}" stroke="{GRID}"/><line x1="{x:.2f}" x2="{x:.2f}" y1="{bottom}" '
                   f'y2="{bottom + 5}" stroke="{AXIS}"/><text x="{x:.2f}" y="{bottom + 17}" '
                   f'text-anchor="middle">{step}</text></g>')
    if c.ticks > c.report.steps * tps:  # graph executor: the model outputs stay in the pool after the last step
        end = c.x(c.report.steps * tps)
        out.append(f'<g class="run-end"><line x1="{end:.2f}" x2="{end:.2f}" y1="{top}" y2="{bottom}" '
                   f'stroke="{AXIS}" stroke-dasharray="2 3"/><text x="{end + 3:.2f}" y="{bottom + 17}">'
                   'after the run</text></g>')
    out.append("</g>")
    return out


def _lower_bound(c: _Canvas, lane: Lane, top: float) -> list[str]:
    if not 0 < lane.lower_bound <= max(lane.size, 1):
        return []
    y = top + PANEL * (1 - lane.lower_bound / max(lane.size, 1))
    label = f"lower bound {human_bytes(lane.lower_bound)}"
    return [f'<g class="lower-bound" data-bytes="{lane.lower_bound}"><line x1="{LEFT}" '
            f'x2="{LEFT + c.plot_width:.2f}" y1="{y:.2f}" y2="{y:.2f}" stroke="{BOUND}" stroke-width="1.5" '
            f'stroke-dasharray="6 4"/><text x="{LEFT + c.plot_width - 4:.2f}" y="{y - 4:.2f}" text-anchor="end" '
            f'fill="{BOUND}" stroke="white" stroke-width="3" paint-order="stroke">{esc(label)}</text></g>']


def _peak(c: _Canvas, lane: Lane, peak: Peak, top: float) -> list[str]:
    x = c.x(peak.tick + 0.5)
    size = max(lane.size, 1)
    y = top + PANEL * (1 - min(peak.bytes, size) / size)
    kernel = c.report.kernels[peak.step] if c.report.kernels else ""
    chars = int(c.plot_width / CHAR)
    where = _cut(f"peak {human_bytes(peak.bytes)} alive at step {peak.step} ({kernel})", chars)
    alive = _cut(f"alive: {alive_listing(peak)}", chars)
    return [f'<g class="peak" data-step="{peak.step}" data-bytes="{peak.bytes}">'
            f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{top}" y2="{top + PANEL}" stroke="{PEAK}" stroke-width="1.5"/>'
            f'<circle cx="{x:.2f}" cy="{y:.2f}" r="4" fill="{PEAK}"/>'
            f'<text class="peak-label" x="{LEFT}" y="{top - 22}" fill="{PEAK}">{esc(where)}</text>'
            f'<text class="peak-alive" x="{LEFT}" y="{top - 8}" fill="{PEAK}">{esc(alive)}</text></g>']


def _lane(c: _Canvas, lane: Lane, index: int, top: float, stride: int) -> list[str]:
    plot_top = top + LANE_HEADER
    limit = f", limit {human_bytes(lane.limit)}" if lane.limit is not None else ""
    header = _cut(f"pool '{lane.pool}' (lane {index + 1} of {len(c.report.lanes)}): {human_bytes(lane.size)} planned "
              f"({lane.size} B), lower bound {human_bytes(lane.lower_bound)}{limit}, {len(lane.buffers)} buffers, "
              f"planner {lane.algorithm}", int(c.plot_width / CHAR))
    out = [f'<g class="lane" data-pool="{esc(lane.pool)}" data-size="{lane.size}">',
           f'<text class="lane-label" x="{LEFT}" y="{top + 14}" font-weight="bold">{esc(header)}</text>']
    out += _axes(c, lane, plot_top, stride)
    out.append('<g class="buffers">')
    out += [_buffer(c, lane, b, plot_top) for b in lane.buffers]
    out.append("</g>")
    out += _lower_bound(c, lane, plot_top)
    if lane.peak is not None:
        out += _peak(c, lane, lane.peak, plot_top)
    out.append(f'<rect class="frame" x="{LEFT}" y="{plot_top}" width="{c.plot_width:.2f}" height="{PANEL}" '
               f'fill="none" stroke="{AXIS}"/></g>')
    return out


def _pieces(c: _Canvas, top: float) -> list[str]:
    """A strip under the lanes: which piece of a named compilation runs each step."""
    colour = {p: PIECE_COLOURS[k % len(PIECE_COLOURS)] for k, p in enumerate(dict.fromkeys(c.report.pieces))}
    tps = c.report.ticks_per_step
    out = [f'<g class="pieces"><text x="{LEFT - 8}" y="{top + 10}" text-anchor="end">piece</text>']
    for step, piece in enumerate(c.report.pieces):
        x0, x1 = c.x(step * tps), c.x((step + 1) * tps)
        out.append(f'<rect class="piece-step" data-piece="{esc(piece)}" x="{x0:.2f}" y="{top}" '
                   f'width="{x1 - x0:.2f}" height="12" fill="{colour[piece]}"><title>{esc(f"step {step}: {piece}")}'
                   '</title></rect>')
    x = LEFT
    for piece, fill in colour.items():
        out.append(f'<g class="legend-entry" data-kind="piece" transform="translate({x},{top + 18})">'
                   f'<rect width="14" height="10" fill="{fill}"/><text x="20" y="10">{esc(piece)}</text></g>')
        x += int(32 + CHAR * len(piece))
    out.append("</g>")
    return out


def _kernel_labels(c: _Canvas, top: float, stride: int) -> tuple[list[str], float]:
    """Kernel names under the last lane, vertical, every `stride` steps; returns the markup and its height."""
    prefix = common_prefix(c.report.kernels)
    labels = [(step, _cut(f"{step} {c.report.kernels[step][len(prefix):]}", LABEL_CHARS))
              for step in range(0, c.report.steps, stride)]
    height = 6.2 * max((len(text) for _, text in labels), default=0) + 8  # (rotated: tighter than CHAR)
    title = f"time: kernel steps{f' (names without {prefix})' if prefix else ''}, a label every {stride} step(s)"
    out = [f'<g class="kernel-labels" data-stride="{stride}">']
    for step, text in labels:
        x = c.step_x(step)
        out.append(f'<text class="kernel-label" data-step="{step}" transform="translate({x + 4:.2f},{top}) '
                   f'rotate(-90)" text-anchor="end">{esc(text)}</text>')
    out.append(f'<text class="axis-title" x="{LEFT + c.plot_width / 2:.2f}" y="{top + height + 16:.2f}" '
               f'text-anchor="middle">{esc(title)}</text></g>')
    return out, height + 24


def render_svg(report: MemoryReport, title: str = "tessera memory plan") -> str:
    c = _Canvas(report)
    stride = label_stride(report.steps, c.plot_width)
    summary = report.text().splitlines()[0]
    body: list[str] = [f'<text class="title" x="{LEFT}" y="22" font-size="15" font-weight="bold">{esc(title)}</text>',
                       f'<text class="summary" x="{LEFT}" y="42">{esc(summary)}</text>']
    if report.int8_bound:  # the pools beside what one int8 layer needs at once
        body.append(f'<text class="int8-bound" x="{LEFT}" y="60">{esc(report.text().splitlines()[-1].strip())}</text>')
    legend, height = _legend(78 if report.int8_bound else 60, c.plot_width)
    body += legend
    y = (78 if report.int8_bound else 60) + height + 12
    for k, lane in enumerate(report.lanes):
        body += _lane(c, lane, k, y, stride)
        y += LANE_HEADER + PANEL + LANE_FOOTER
    if report.pieces:
        body += _pieces(c, y)
        y += 40
    labels, height = _kernel_labels(c, y + 4, stride)
    body += labels
    total_height = int(y + height + 12)
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" width="{c.width}" height="{total_height}" '
                      f'viewBox="0 0 {c.width} {total_height}" font-family="sans-serif" font-size="11">',
                      f"<title>{esc(title)}</title>",
                      f'<rect width="{c.width}" height="{total_height}" fill="white"/>',
                      *body, "</svg>"]) + "\n"


__all__: Sequence[str] = ("byte_ticks", "common_prefix", "esc", "label_stride", "render_svg")
