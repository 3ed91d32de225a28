"""What the memory planner did: figures as text, and the pools over time as SVG.

    report = memory_report(lib)        # an AotLibrary or a graph-executor library
    report = memory_report(lib, int8_bound=int8_activation_bound(mod, params))   # int8 models: beside the bound
    print(report.text())
    Path("memory.svg").write_text(report.svg())

The picture has one panel per pool: time runs left to right (kernel steps,
each split into its kernel's top-level statements), offsets bottom to top,
and every buffer is a rectangle of its offset range by its lifetime; scratch
is drawn lighter than tensors. A dashed line marks the lower bound.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from .program_memory import ProgramMemory

WIDTH, PANEL, MARGIN = 960, 320, 56
TENSOR, SCRATCH, EDGE = "#6baed6", "#fdd0a2", "#31597a"


@dataclass
class MemoryReport:
    memory: ProgramMemory
    order: str  # the operator-order strategy that won
    steps: int
    int8_bound: int = 0  # the model's int8 activation bound (backend/int8_bound.py); 0: not an int8 model

    def text(self) -> str:
        m = self.memory
        lines = [
            f"memory: {m.total} bytes in {len(m.pools)} pool(s); lower bound {m.lower_bound} bytes "
            f"(ratio {m.total / max(m.lower_bound, 1):.3f}) for the executed order ({self.order}, {self.steps} steps)",
            f"  lower bound of the file's own order (whole-step lifetimes, no sharing): {m.file_order_bound} bytes; "
            f"with the same rules: {m.file_order_same_rules} bytes",
            f"  buffers: {len(m.buffers)}; shared in place: {m.inplace}",
        ]
        for p in m.pools:
            limit = f" of {p.spec.size_bytes}" if p.spec.size_bytes is not None else ""
            lines.append(f"  pool {p.name}: {p.size}{limit} bytes, {len(p.plan.buffers)} buffers, "
                         f"planner {p.plan.algorithm}, lower bound {p.plan.lower_bound}")
        if self.int8_bound:
            lines.append(f"  int8 activation bound: {self.int8_bound} bytes (the largest layer's int8 input(s) + "
                         f"output); pools {m.total} bytes = {m.total / self.int8_bound:.3f} x the bound")
        return "\n".join(lines)

    def svg(self, title: str = "tessera memory plan") -> str:
        m = self.memory
        end = max((b.end for b in m.buffers), default=0) + 1
        height = MARGIN + len(m.pools) * (PANEL + MARGIN)
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH + 2 * MARGIN}" height="{height}" '
               f'font-family="sans-serif" font-size="12">',
               f'<text x="{MARGIN}" y="20" font-size="14">{html.escape(title)}</text>',
               f'<text x="{MARGIN}" y="38">{html.escape(self.text().splitlines()[0])}</text>']
        if self.int8_bound:  # the pool beside what one int8 layer needs at once
            out.append(f'<text x="{MARGIN + WIDTH // 2}" y="20">{html.escape(self.text().splitlines()[-1].strip())}'
                       '</text>')
        for k, pool in enumerate(m.pools):
            top = MARGIN + k * (PANEL + MARGIN) + 10
            size = max(pool.size, 1)
            out.append(f'<rect x="{MARGIN}" y="{top}" width="{WIDTH}" height="{PANEL}" fill="none" stroke="#999"/>')
            out.append(f'<text x="{MARGIN}" y="{top + PANEL + 16}">pool {html.escape(pool.name)}: '
                       f'{pool.size} bytes (offset up, time right)</text>')
            for b in pool.plan.buffers:
                x = MARGIN + WIDTH * b.start / end
                w = max(WIDTH * (b.end + 1 - b.start) / end, 0.5)
                y = top + PANEL * (1 - (pool.plan.offsets[b.name] + b.size) / size)
                h = max(PANEL * b.size / size, 0.5)
                fill = SCRATCH if b.name.startswith("ws") else TENSOR
                out.append(f'<rect x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}" fill="{fill}" '
                           f'stroke="{EDGE}" stroke-width="0.3"><title>{html.escape(b.name)}: {b.size} B at '
                           f'{pool.plan.offsets[b.name]}, ticks {b.start}-{b.end}</title></rect>')
            if pool.plan.lower_bound <= size:
                y = top + PANEL * (1 - pool.plan.lower_bound / size)
                out.append(f'<line x1="{MARGIN}" x2="{MARGIN + WIDTH}" y1="{y:.2f}" y2="{y:.2f}" stroke="#d62728" '
                           f'stroke-dasharray="6 4"><title>lower bound {pool.plan.lower_bound} B</title></line>')
        out.append("</svg>")
        return "\n".join(out) + "\n"


def memory_report(lib: object, int8_bound: int = 0) -> MemoryReport:
    """The report of a built library (AOT: `lib.program`; graph executor: `lib.memory_plan`).

    `int8_bound`: the model's int8 activation bound, printed beside the pools with their ratio to it."""
    program = getattr(lib, "program", None)
    if program is not None:
        return MemoryReport(program.planned, program.order_strategy, len(program.steps), int8_bound)
    plan = getattr(lib, "graph_plan", None)
    if plan is None or plan.memory is None:
        raise TypeError(f"no memory plan on {type(lib).__name__}; build it with tessera.build first")
    return MemoryReport(plan.memory, plan.program.order_strategy, len(plan.program.steps), int8_bound)
