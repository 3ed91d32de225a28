"""The partition report's graph as Graphviz DOT, and its SVG from `dot`.

Graphviz places everything; this module only says what is drawn:

- a host kernel is a box, filled with its target's (or piece's) colour;
- an accelerator partition is a cluster, labelled with its name and target,
  holding one box per composite or operator it runs;
- constants are not drawn: their types are listed in their reader's label;
- every edge has an arrowhead and the type of the tensor it carries.

A deep network drawn top to bottom is one very tall column (DenseNet-121
has some 500 ranks). So the graph is cut into bands of consecutive depth,
a kernel at a time, and the edges that cross from one band to the next do
not constrain the ranking: each band is then ranked on its own, and `dot`
sets the bands side by side, like the columns of a newspaper.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Iterable

from ..errors import TesseraError
from .report import HOST, KernelNode, PartitionReport

DOT_TIMEOUT_S = 600
# How many ranks one band holds, relative to the square root of the depth: a band of
# `BAND_SCALE * sqrt(depth)` ranks sets DenseNet-121 (depth ~530) in 9 columns, 1.4 times as wide as tall.
BAND_SCALE = 1.6
MIN_BAND = 24  # shallower graphs stay in one band
LINE_CHARS = 30  # wrap labels at about this width
SHOWN_CONSTANTS = 2


def quote(text: str) -> str:
    """`text` as a DOT string, drawn literally: a backslash would start a DOT escape (\\N is the node's
    name) and Graphviz decodes HTML entities (&amp;) even in quoted strings."""
    for raw, escaped in (("&", "&amp;"), ("\\", "\\\\"), ('"', '\\"'), ("\n", " "), ("\r", " ")):
        text = text.replace(raw, escaped)
    return f'"{text}"'


def multiline(lines: Iterable[str]) -> str:
    """Lines as one DOT string, each escaped on its own and joined by DOT's centred line break."""
    return '"' + "\\n".join(quote(line)[1:-1] for line in lines) + '"'


def _wrap(words: list[str], sep: str = " + ") -> list[str]:
    lines: list[str] = []
    for w in words:
        if lines and len(lines[-1]) + len(sep) + len(w) <= LINE_CHARS:
            lines[-1] += sep + w
        else:
            lines.append(w)
    return lines


def _shape(label: str) -> str:
    return label.replace(" float32", "")  # the common case goes without saying


def _constants_line(constants: list[str]) -> list[str]:
    if not constants:
        return []
    shown = ", ".join(_shape(c) for c in constants[:SHOWN_CONSTANTS])
    more = f" +{len(constants) - SHOWN_CONSTANTS}" if len(constants) > SHOWN_CONSTANTS else ""
    return [f"const {shown}{more}"]


def _kernel_lines(k: KernelNode) -> list[str]:
    return [k.name, *_wrap(list(dict.fromkeys(k.ops))), *_constants_line(k.constants)]


def _depths(report: PartitionReport) -> dict[str, int]:
    """Longest path from an input to every drawn node (edges come in producer-first order)."""
    depth: dict[str, int] = {}
    for e in report.edges:
        depth.setdefault(e.src, 0)
        depth[e.dst] = max(depth.get(e.dst, 0), depth[e.src] + 1)
    return depth


def _bands(report: PartitionReport, depth: dict[str, int]) -> dict[str, int]:
    """The band of every drawn node: a kernel's nodes share the band of its shallowest one."""
    total = max(depth.values(), default=0) + 1
    size = max(MIN_BAND, math.ceil(BAND_SCALE * math.sqrt(total)))
    band = {node: d // size for node, d in depth.items()}
    for k in report.kernels:
        nodes = [m.node_id for m in k.members] if k.partition else [k.node_id]
        first = min((depth.get(n, 0) for n in nodes), default=0) // size
        band.update({n: first for n in nodes})
    return band


def report_dot(report: PartitionReport) -> str:
    colours = report.colours()
    depth = _depths(report)
    band = _bands(report, depth)
    out = [
        "digraph partitions {",
        '  graph [rankdir=TB, newrank=true, ranksep=0.28, nodesep=0.2, fontname="Helvetica", fontsize=11, '
        'labeljust=l, outputorder=edgesfirst];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9, margin="0.06,0.03", '
        'height=0.3, penwidth=0.7];',
        '  edge [fontname="Helvetica", fontsize=7, fontcolor="#555555", color="#666666", arrowsize=0.6, '
        'penwidth=0.7];',
    ]
    for t in report.terminals:
        out.append(f"  {t.node_id} [label={multiline(t.label.splitlines())}, shape=ellipse, "
                   f'fillcolor="#ffffff"];')
    for k in report.kernels:
        colour = colours[k.target]
        tip = f"{k.name} on {k.target}: {', '.join(k.ops)}"
        if not k.partition:
            out.append(f"  {k.node_id} [label={multiline(_kernel_lines(k))}, fillcolor={quote(colour)}, "
                       f"tooltip={quote(tip)}];")
            continue
        out.append(f"  subgraph {k.node_id} {{")
        out.append(f"    label={quote(f'{k.name} [{k.target}]')}; style=\"rounded,filled\"; "
                   f"fillcolor={quote(colour + '40')}; color={quote(colour)}; penwidth=1.2; tooltip={quote(tip)};")
        for m in k.members:
            lines = [m.name, *(_wrap(m.ops) if m.ops != [m.name] else []), *_constants_line(m.constants)]
            out.append(f"    {m.node_id} [label={multiline(lines)}, fillcolor={quote(colour)}, "
                       f"tooltip={quote(f'{k.name}: ' + ' + '.join(m.ops))}];")
        out.append("  }")
    for e in report.edges:
        crossing = band.get(e.src, 0) != band.get(e.dst, 0)
        extra = ", constraint=false, style=dashed" if crossing else ""
        out.append(f"  {e.src} -> {e.dst} [label={quote(_shape(e.label))}{extra}];")
    out += _column_order(band, depth)
    out.append(_legend(colours))
    out.append("}")
    return "\n".join(out) + "\n"


def _column_order(band: dict[str, int], depth: dict[str, int]) -> list[str]:
    """Set the bands left to right in order: their top nodes share a rank, linked by invisible edges."""
    heads: dict[int, str] = {}
    for node, b in band.items():
        if b not in heads or depth[node] < depth[heads[b]]:
            heads[b] = node
    if len(heads) < 2:
        return []
    chain = " -> ".join(heads[b] for b in sorted(heads))
    return [f"  {{ rank=same; {chain} [style=invis]; }}"]


def _legend(colours: dict[str, str]) -> str:
    """The colour of each target, as a small cluster of its own."""
    rows = [f"    legend{i} [label={quote(t if t != HOST else 'host (default flow)')}, fillcolor={quote(c)}];"
            for i, (t, c) in enumerate(colours.items())]
    return "\n".join(["  subgraph cluster_legend {", '    label="targets"; style=dashed; color="#999999";', *rows,
                      "  }"])


def render_svg(dot_text: str) -> str:
    """The SVG `dot` draws for `dot_text` (just the <svg> element, ready to inline in HTML)."""
    exe = shutil.which("dot")
    if exe is None:
        raise TesseraError("the partition report needs Graphviz `dot`, which is not on PATH: install the Debian "
                           "package graphviz (scripts/setup.sh does)")
    done = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=DOT_TIMEOUT_S)
    if done.returncode != 0:
        raise TesseraError(f"Graphviz dot failed (exit {done.returncode}): {done.stderr.strip()[:2000]}")
    svg = done.stdout
    return svg[svg.index("<svg"):]
