"""Which operators went to which target: a text summary and an SVG picture.

    report = partition_report(lib)      # lib from tessera.build
    print(report.text())
    Path("report.html").write_text(report.html())

The picture is self-contained HTML with an inline SVG: one box per kernel
(a fused host kernel or an accelerator partition), laid out by depth in the
graph, coloured by target, edges following the data.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field

from ..op.registry import Op
from ..relay.expr import Call, Function, GlobalVar, Tuple, TupleGetItem
from ..relay.module import IRModule
from ..relay.visitor import post_order
from ..transform.plan_devices import DEVICE_ATTR

HOST = "host"
PALETTE = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#fdd0a2", "#c7e9c0", "#dadaeb"]


@dataclass
class KernelNode:
    name: str
    target: str
    ops: list[str]
    inputs: list[int] = field(default_factory=list)  # indices of producer kernels
    partition: bool = False  # a whole partition of an accelerator, not one kernel


@dataclass
class PartitionReport:
    kernels: list[KernelNode]

    def op_counts(self) -> dict[str, Counter]:
        counts: dict[str, Counter] = {}
        for k in self.kernels:
            counts.setdefault(k.target, Counter()).update(k.ops)
        return counts

    def text(self) -> str:
        lines = []
        total = sum(len(k.ops) for k in self.kernels)
        for target, counter in sorted(self.op_counts().items(), key=lambda kv: (kv[0] != HOST, kv[0])):
            n_ops = sum(counter.values())
            n_kernels = sum(1 for k in self.kernels if k.target == target)
            partitions = all(k.partition for k in self.kernels if k.target == target)
            lines.append(f"{target}: {n_ops} of {total} operators in {n_kernels} "
                         f"{'partitions' if partitions else 'kernels'}")
            for op, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"    {n:5d}  {op}")
        return "\n".join(lines)

    def colours(self) -> dict[str, str]:
        targets = sorted({k.target for k in self.kernels}, key=lambda t: (t != HOST, t))
        return {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(targets)}

    def svg(self) -> str:
        depth: list[int] = []
        for k in self.kernels:
            depth.append(1 + max((depth[i] for i in k.inputs), default=-1))
        rows: dict[int, list[int]] = {}
        for idx, d in enumerate(depth):
            rows.setdefault(d, []).append(idx)
        box_w, box_h, gap_x, gap_y = 170, 34, 20, 28
        width = max((len(v) for v in rows.values()), default=1) * (box_w + gap_x) + gap_x
        height = len(rows) * (box_h + gap_y) + gap_y
        pos = {}
        for d, idxs in rows.items():
            for col, idx in enumerate(idxs):
                pos[idx] = (gap_x + col * (box_w + gap_x), gap_y + d * (box_h + gap_y))
        colours = self.colours()
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                 f'font-family="sans-serif" font-size="11">']
        for idx, k in enumerate(self.kernels):
            x2, y2 = pos[idx]
            for src in k.inputs:
                x1, y1 = pos[src]
                parts.append(f'<line x1="{x1 + box_w / 2}" y1="{y1 + box_h}" x2="{x2 + box_w / 2}" y2="{y2}" '
                             'stroke="#888" stroke-width="1"/>')
        for idx, k in enumerate(self.kernels):
            x, y = pos[idx]
            label = html.escape(", ".join(dict.fromkeys(k.ops))[:28])
            title = html.escape(f"{k.name} [{k.target}]: {', '.join(k.ops)}")
            parts.append(f'<g><title>{title}</title><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="5" '
                         f'fill="{colours[k.target]}" stroke="#333"/>'
                         f'<text x="{x + 6}" y="{y + 14}">{label}</text>'
                         f'<text x="{x + 6}" y="{y + 27}" fill="#444">{html.escape(k.target)}</text></g>')
        parts.append("</svg>")
        return "\n".join(parts)

    def html(self, title: str = "tessera partition report") -> str:
        legend = " ".join(f'<span style="background:{c};padding:2px 8px;margin-right:6px">{html.escape(t)}</span>'
                          for t, c in self.colours().items())
        return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>\n"
                f"<body><h1>{html.escape(title)}</h1><p>{legend}</p>\n<pre>{html.escape(self.text())}</pre>\n"
                f"{self.svg()}\n</body></html>\n")


def _ops_of(func: Function) -> list[str]:
    names = []
    for node in post_order(func.body):
        if isinstance(node, Call) and isinstance(node.op, Op):
            names.append(node.op.name)
    return names


def _producers(e: object, index: dict[int, int]) -> list[int]:
    """Kernels that directly produce `e`, looking through tuples."""
    stack, found = [e], []
    while stack:
        x = stack.pop()
        if id(x) in index:
            found.append(index[id(x)])
        elif isinstance(x, TupleGetItem):
            stack.append(x.tuple_value)
        elif isinstance(x, Tuple):
            stack.extend(x.fields)
    return found


def partition_report(source: IRModule | object) -> PartitionReport:
    """Report on a partitioned module, or on a library from `tessera.build`."""
    mod = source if isinstance(source, IRModule) else getattr(source, "partitioned_mod", None)
    if mod is None:
        raise ValueError("no partitioned module: pass an IRModule or a library built by tessera.build")
    kernels: list[KernelNode] = []
    index: dict[int, int] = {}
    for node in post_order(mod.main, into_functions=False):
        if not isinstance(node, Call) or isinstance(node.op, Op):
            continue
        if isinstance(node.op, GlobalVar):
            func = mod[node.op]
            target = func.attrs.compiler if isinstance(func, Function) and func.attrs.compiler else HOST
            name = node.op.name_hint
            ops = _ops_of(func) if isinstance(func, Function) else []
        elif isinstance(node.op, Function):  # a kernel of the default flow, on its named piece if any
            device = node.op.attrs.extra.get(DEVICE_ATTR)
            target = device if isinstance(device, str) else HOST
            name, ops = f"kernel_{len(kernels)}", _ops_of(node.op)
        else:
            continue
        producers = [p for a in node.args for p in _producers(a, index)]
        index[id(node)] = len(kernels)
        kernels.append(KernelNode(name, target, ops, sorted(set(producers)),
                                  isinstance(node.op, GlobalVar) and target != HOST))
    return PartitionReport(kernels)
