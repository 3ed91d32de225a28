"""Which operators went to which target: a text summary and an HTML page.

    report = partition_report(lib)      # lib from tessera.build
    print(report.text())
    Path("report.html").write_text(report.html())

This module reads the partitioned module into a small graph of kernels:
an accelerator partition with one member per composite or operator it
runs, a host kernel (one fused primitive function) as a single box, the
graph's inputs and output, and the tensors between them. Graphviz lays the
graph out (report_graph.py); report_html.py builds the page around it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..op.registry import Op
from ..relay.expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var
from ..relay.module import IRModule
from ..relay.visitor import post_order
from ..relay.ty import Type
from ..transform.declines import Declined, Refusal, call_signature, declined, describe_type, type_text
from ..transform.pack_gemm_weights import PACKED_FORMS
from ..transform.plan_devices import DEVICE_ATTR

HOST = "host"
PALETTE = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#fdd0a2", "#c7e9c0", "#dadaeb"]


@dataclass
class Member:
    """One composite or operator call inside an accelerator partition."""

    node_id: str
    name: str  # the composite ("blas.conv2d") or the operator
    ops: list[str]
    constants: list[str] = field(default_factory=list)  # types of the constants it reads


@dataclass
class KernelNode:
    name: str
    target: str
    ops: list[str]
    inputs: list[int] = field(default_factory=list)  # indices of producer kernels
    partition: bool = False  # a whole partition of an accelerator, not one kernel
    members: list[Member] = field(default_factory=list)  # a partition's calls, in order
    constants: list[str] = field(default_factory=list)  # a host kernel's constants (types)
    node_id: str = ""  # its box in the graph (a host kernel), or its cluster (a partition)
    op_calls: list[tuple[str, str]] = field(default_factory=list)  # (operator, call_signature) of each call


@dataclass(frozen=True)
class Edge:
    src: str  # node ids
    dst: str
    ty: Type | None  # the tensor's type

    @property
    def label(self) -> str:
        return describe_type(self.ty)


@dataclass(frozen=True)
class Terminal:
    """An input of the graph, or its output."""

    node_id: str
    label: str
    name: str = ""  # an input's name in the model


@dataclass
class PartitionReport:
    kernels: list[KernelNode]
    edges: list[Edge] = field(default_factory=list)
    terminals: list[Terminal] = field(default_factory=list)
    declined: tuple[Declined, ...] = ()

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

    def reasons(self, kernel: KernelNode) -> list[tuple[str, str, str]]:
        """Why each operator of a kernel left on the host stayed: (operator, target, reason), once each.

        A pattern that matched but was refused is the specific answer; "no
        pattern or rule" notes of the same target for the same call are then left out.
        """
        found: dict[tuple[str, str, str], None] = {}
        for op, signature in kernel.op_calls:
            notes = [d for d in self.declined if d.op == op and d.signature == signature]
            if not notes and op in PACKED_FORMS:  # its weight was packed after partitioning: a new type
                op, data = PACKED_FORMS[op], _first_operand(signature)
                notes = [d for d in self.declined if d.op == op and _first_operand(d.signature) == data]
            specific = {d.target for d in notes if d.kind.matched_a_pattern}
            for d in notes:
                if d.target not in specific or d.kind is not Refusal.NO_RULE:
                    found[(op, d.target, d.reason)] = None
        return list(found)

    def dot(self) -> str:
        from .report_graph import report_dot

        return report_dot(self)

    def svg(self) -> str:
        from .report_graph import render_svg

        return render_svg(self.dot())

    def html(self, title: str = "tessera partition report") -> str:
        from .report_html import report_page

        return report_page(self, title)


def _ops_of(func: Function) -> list[str]:
    return [n.op.name for n in post_order(func.body) if isinstance(n, Call) and isinstance(n.op, Op)]


def _op_calls(func: Function) -> list[tuple[str, str]]:
    return [(n.op.name, call_signature(n)) for n in post_order(func.body)
            if isinstance(n, Call) and isinstance(n.op, Op)]


@dataclass(frozen=True)
class _Port:
    """A tensor as the graph draws it: the node that produces it, and its type."""

    node_id: str
    ty: Type | None


@dataclass(frozen=True)
class _Const:
    label: str


_Value = _Port | _Const | tuple  # a tuple of values for a tuple-typed expression


class _Builder:
    """Walks `main` (and each partition's body) once, turning values into edges."""

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.kernels: list[KernelNode] = []
        self.edges: list[Edge] = []
        self.terminals: list[Terminal] = []
        self.kernel_of: dict[str, int] = {}  # node id -> kernel index

    def value(self, e: Expr, values: dict[int, _Value]) -> _Value:
        if id(e) in values:
            return values[id(e)]
        if isinstance(e, Constant):
            return _Const(type_text(e))
        if isinstance(e, Tuple):
            return tuple(self.value(f, values) for f in e.fields)
        if isinstance(e, TupleGetItem):
            whole = self.value(e.tuple_value, values)
            if isinstance(whole, tuple):
                return whole[e.index]
            if isinstance(whole, _Port):  # one box makes the whole tuple: the edge names the field
                return _Port(whole.node_id, e.checked_type_)
            return whole
        return ()  # something the picture does not draw (a global function's name)

    def connect(self, value: _Value, dst: str, constants: list[str]) -> list[int]:
        """Edges from `value` into `dst`; constants fold into `dst`'s label. Returns producer kernels."""
        if isinstance(value, _Const):
            constants.append(value.label)
            return []
        if isinstance(value, _Port):
            self.edges.append(Edge(value.node_id, dst, value.ty))
            return [self.kernel_of[value.node_id]] if value.node_id in self.kernel_of else []
        return [k for v in value for k in self.connect(v, dst, constants)]

    def add_kernel(self, kernel: KernelNode, args: tuple[Expr, ...], values: dict[int, _Value]) -> _Port:
        index = len(self.kernels)
        kernel.node_id = f"k{index}"
        self.kernel_of[kernel.node_id] = index
        producers = [p for a in args for p in self.connect(self.value(a, values), kernel.node_id, kernel.constants)]
        kernel.inputs = sorted(set(producers))
        self.kernels.append(kernel)
        return _Port(kernel.node_id, None)

    def add_partition(self, name: str, target: str, func: Function, args: tuple[Expr, ...],
                      values: dict[int, _Value]) -> _Value:
        index = len(self.kernels)
        kernel = KernelNode(name, target, _ops_of(func), partition=True, node_id=f"cluster_k{index}",
                            op_calls=_op_calls(func))
        self.kernels.append(kernel)
        inner: dict[int, _Value] = {id(p): self.value(a, values) for p, a in zip(func.params, args)}
        producers: list[int] = []
        for node in post_order(func.body, into_functions=False):
            if not isinstance(node, Call) or id(node) in inner:
                continue
            if isinstance(node.op, Function) and node.op.attrs.composite:
                member = Member(f"k{index}m{len(kernel.members)}", node.op.attrs.composite, _ops_of(node.op))
            elif isinstance(node.op, Op):
                member = Member(f"k{index}m{len(kernel.members)}", node.op.name, [node.op.name])
            else:
                continue
            self.kernel_of[member.node_id] = index
            kernel.members.append(member)
            for a in node.args:
                producers += [p for p in self.connect(self.value(a, inner), member.node_id, member.constants)
                              if p != index]
            inner[id(node)] = _Port(member.node_id, node.checked_type_)
        kernel.inputs = sorted(set(producers))
        return self.value(func.body, inner)

    def build(self) -> PartitionReport:
        main = self.mod.main
        values: dict[int, _Value] = {}
        for k, param in enumerate(main.params):
            node_id = f"in{k}"
            self.terminals.append(Terminal(node_id, f"input {param.name_hint}\n{type_text(param)}", param.name_hint))
            values[id(param)] = _Port(node_id, param.checked_type_)
        for node in post_order(main.body, into_functions=False):
            if not isinstance(node, Call):
                continue
            if isinstance(node.op, GlobalVar):
                func = self.mod[node.op]
                if isinstance(func, Function) and func.attrs.compiler:
                    values[id(node)] = self.add_partition(node.op.name_hint, func.attrs.compiler, func, node.args,
                                                          values)
                    continue
                kernel = KernelNode(node.op.name_hint, HOST, _ops_of(func) if isinstance(func, Function) else [])
            elif isinstance(node.op, Function):  # a kernel of the default flow, on its named piece if any
                device = node.op.attrs.extra.get(DEVICE_ATTR)
                kernel = KernelNode(f"kernel_{len(self.kernels)}", device if isinstance(device, str) else HOST,
                                    _ops_of(node.op), op_calls=_op_calls(node.op))
            elif isinstance(node.op, Op):
                kernel = KernelNode(f"kernel_{len(self.kernels)}", HOST, [node.op.name],
                                    op_calls=[(node.op.name, call_signature(node))])
            else:
                continue
            values[id(node)] = _Port(self.add_kernel(kernel, node.args, values).node_id, node.checked_type_)
        self.terminals.append(Terminal("out", "output"))
        self.connect(self.value(main.body, values), "out", [])
        return PartitionReport(self.kernels, self.edges, self.terminals, declined(self.mod))


def partition_report(source: IRModule | object) -> PartitionReport:
    """Report on a partitioned module, or on a library from `tessera.build`."""
    mod = source if isinstance(source, IRModule) else getattr(source, "partitioned_mod", None)
    if mod is None:
        raise ValueError("no partitioned module: pass an IRModule or a library built by tessera.build")
    return _Builder(mod).build()


def _first_operand(signature: str) -> str:
    """The first operand's type in a call signature such as "(1x16x8x8 float32, 16x16x1x1 float32)"."""
    return signature.strip("()").split(", ")[0]
