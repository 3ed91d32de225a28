"""Graph executor codegen: the lowered `main` as a JSON graph of kernel calls.

Nodes are inputs, parameters and kernel calls, in execution order; every
node output is an "entry" with shape, dtype, a storage id (its buffer) and
an offset in the one memory pool. The order, the liveness and the offsets
come from `program.py`, shared with the AOT executor: kernel results and
kernel scratch (a kernel node's "scratch": [offset, bytes] pairs, passed
after its outputs) are planned statically; model outputs stay alive to the
end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..relay.module import IRModule
from ..tir.stmt import PrimFunc
from .lower_te import FUSED_OPS_ATTR
from .program import Program, Role, Tensor, extract_program
from .program_memory import MemoryOptions, ProgramMemory, plan_program_memory

# 2: a segment returns the failed call's status, its number through an out-parameter; 3: "view" nodes
GRAPH_FORMAT_VERSION = 3


@dataclass
class GraphNode:
    op: str  # "input", "param", "kernel", or "view" (a concatenation its inputs were computed in: no call)
    name: str
    inputs: list[tuple[int, int]] = field(default_factory=list)  # (node id, output index)
    func: str | None = None
    num_outputs: int = 1
    scratch: list[tuple[int, int]] = field(default_factory=list)  # (pool offset, bytes) per scratch argument
    ops: tuple[str, ...] = ()  # a kernel's fused operators (LowerTE's FUSED_OPS_ATTR), for profiles


@dataclass
class Segment:
    """Consecutive kernel calls that one generated C function makes in order.

    The function takes one array of argument pointers (every call's
    arguments, call after call) and a place for the number (from 1) of the
    call that failed; it returns 0, or that call's status. A run is then one
    call from Python per segment, not one per kernel.
    """

    func: str
    nodes: list[int]  # kernel node ids


@dataclass
class GraphPlan:
    nodes: list[GraphNode]
    entries: list[dict]  # per output entry: shape, dtype, storage_id
    node_row_ptr: list[int]
    outputs: list[tuple[int, int]]
    input_nodes: list[int]
    params: dict[str, np.ndarray]
    pool_size: int = 0
    memory: ProgramMemory | None = None
    program: Program | None = None  # the steps and tensors the plan came from
    segments: list[Segment] = field(default_factory=list)  # runs of C kernel calls made by one C function

    def to_json(self) -> str:
        doc = {
            "version": GRAPH_FORMAT_VERSION,
            "nodes": [
                {k: v for k, v in {
                    "op": n.op, "name": n.name, "inputs": [list(i) for i in n.inputs],
                    "func": n.func, "num_outputs": n.num_outputs,
                    "scratch": [list(x) for x in n.scratch] or None,
                    "ops": list(n.ops) or None,
                }.items() if v is not None}
                for n in self.nodes
            ],
            "entries": self.entries,
            "node_row_ptr": self.node_row_ptr,
            "outputs": [list(o) for o in self.outputs],
            "inputs": self.input_nodes,
            "pool_size": self.pool_size,
            "segments": [{"func": seg.func, "nodes": seg.nodes} for seg in self.segments],
        }
        return json.dumps(doc, indent=1, sort_keys=True)


class _GraphBuilder:
    def __init__(self, mod: IRModule, memory: MemoryOptions | None = None) -> None:
        self.mod = mod
        # the graph executor has one pool in host memory: pools configured for devices do not apply
        self.options = replace(memory or MemoryOptions(), pools=())

    def build(self) -> GraphPlan:
        program = extract_program(self.mod, self.options.order, allow_external=True, results_in_pool=True)
        program.pin_results = True
        memory = plan_program_memory(program, self.options)
        buffer_ids = {b.name: k for k, b in enumerate(memory.buffers)}
        nodes: list[GraphNode] = []
        entries: list[dict] = []
        row_ptr = [0]
        refs: dict[int, tuple[int, int]] = {}

        def add(node: GraphNode, tensors: list[Tensor]) -> int:
            nid = len(nodes)
            nodes.append(node)
            for k, t in enumerate(tensors):
                refs[id(t)] = (nid, k)
                pooled = t.role is Role.INTERMEDIATE
                entries.append({"shape": list(t.type.shape), "dtype": t.type.dtype,
                                "storage_id": buffer_ids[t.buffer_owner.name] if pooled else -1,
                                "offset": t.offset if pooled else -1})
            row_ptr.append(len(entries))
            return nid

        input_nodes = [add(GraphNode("input", t.name), [t]) for t in program.inputs]
        params: dict[str, np.ndarray] = {}
        for t in program.params:
            add(GraphNode("param", t.name), [t])
            params[t.name] = np.asarray(t.data, order="C")  # keeps 0-d parameters 0-d
        for s in program.steps:
            kernel = program.kernels.get(s.kernel)
            ops = kernel.attrs.get(FUSED_OPS_ATTR) if kernel is not None else None
            if s.view:
                add(GraphNode("view", s.kernel, [refs[id(a)] for a in s.inputs], None, 1), s.outputs)
                continue
            add(GraphNode("kernel", s.kernel, [refs[id(a)] for a in s.inputs], s.kernel, len(s.outputs),
                          [(t.offset, t.nbytes) for t in s.scratch],
                          tuple(str(o) for o in ops) if isinstance(ops, tuple) else ()), s.outputs)
        outputs = [refs[id(t)] for t in program.results]
        return GraphPlan(nodes, entries, row_ptr, outputs, input_nodes, params, memory.total, memory, program)


SEGMENT_PREFIX = "tsgen_graph_segment_"


def add_segments(plan: GraphPlan, kernels: Mapping[str, PrimFunc]) -> str:
    """Group the plan's C kernel calls (those in `kernels`) into segments; their C source."""
    from ..codegen.c_source import CodeGenC, EXPORT_MACRO, prototype

    runs: list[list[tuple[int, PrimFunc]]] = []  # (node id, its kernel) per call
    in_run = False
    for nid, node in enumerate(plan.nodes):
        if node.op != "kernel":
            continue
        kernel = kernels.get(node.func) if node.func is not None else None
        if kernel is None:
            in_run = False  # an external module's call ends the segment
            continue
        if not in_run:
            runs.append([])
            in_run = True
        runs[-1].append((nid, kernel))
    lines = [*CodeGenC().preamble_lines(), ""]
    lines += sorted({prototype(kernel) for run in runs for _, kernel in run})
    plan.segments = []
    for k, run in enumerate(runs):
        name = f"{SEGMENT_PREFIX}{k}"
        plan.segments.append(Segment(name, [nid for nid, _ in run]))
        lines += ["", f"{EXPORT_MACRO} int32_t {name}(void* const* args, int32_t* failed_call) {{",
                  "  int32_t status;"]
        offset = 0
        for index, (nid, kernel) in enumerate(run, start=1):
            node = plan.nodes[nid]
            count = len(kernel.params)
            # the executor passes inputs, outputs, then scratch: the kernel's parameters, in order
            assert count == len(node.inputs) + node.num_outputs + len(node.scratch), node.func
            args = ", ".join(f"args[{offset + j}]" for j in range(count))
            lines += [f"  if ((status = {node.func}({args})) != 0) {{",
                      f"    *failed_call = {index};",
                      "    return status;",
                      "  }"]
            offset += count
        lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"
