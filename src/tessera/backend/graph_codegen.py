"""Graph executor codegen: the lowered `main` as a JSON graph of kernel calls.

Nodes are inputs, parameters and kernel calls, in execution order; every
node output is an "entry" with shape, dtype and a storage id. Storage is
planned by liveness: an intermediate's storage is reused once its last
reader has run (best fit by size).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..errors import CompileError
from ..relay.expr import Call, Constant, Expr, GlobalVar, Tuple, TupleGetItem, Var
from ..relay.module import IRModule
from ..relay.ty import TensorType, flatten_tensor_types
from ..relay.visitor import post_order

GRAPH_FORMAT_VERSION = 1


@dataclass
class GraphNode:
    op: str  # "input", "param" or "kernel"
    name: str
    inputs: list[tuple[int, int]] = field(default_factory=list)  # (node id, output index)
    func: str | None = None
    num_outputs: int = 1


@dataclass
class GraphPlan:
    nodes: list[GraphNode]
    entries: list[dict]  # per output entry: shape, dtype, storage_id
    node_row_ptr: list[int]
    outputs: list[tuple[int, int]]
    input_nodes: list[int]
    params: dict[str, np.ndarray]

    def to_json(self) -> str:
        doc = {
            "version": GRAPH_FORMAT_VERSION,
            "nodes": [
                {k: v for k, v in {
                    "op": n.op, "name": n.name, "inputs": [list(i) for i in n.inputs],
                    "func": n.func, "num_outputs": n.num_outputs,
                }.items() if v is not None}
                for n in self.nodes
            ],
            "entries": self.entries,
            "node_row_ptr": self.node_row_ptr,
            "outputs": [list(o) for o in self.outputs],
            "inputs": self.input_nodes,
        }
        return json.dumps(doc, indent=1, sort_keys=True)


def _entry_types(e: Expr) -> list[TensorType]:
    return flatten_tensor_types(e.checked_type)


class _GraphBuilder:
    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.nodes: list[GraphNode] = []
        self.types: list[list[TensorType]] = []
        self.params: dict[str, np.ndarray] = {}
        self.refs: dict[int, list[tuple[int, int]]] = {}  # expr id -> its entries

    def add(self, node: GraphNode, types: list[TensorType]) -> list[tuple[int, int]]:
        nid = len(self.nodes)
        self.nodes.append(node)
        self.types.append(types)
        return [(nid, k) for k in range(len(types))]

    def build(self) -> GraphPlan:
        main = self.mod.main
        input_nodes = []
        for p in main.params:
            refs = self.add(GraphNode("input", p.name_hint), _entry_types(p))
            input_nodes.append(refs[0][0])
            self.refs[id(p)] = refs
        for node in post_order(main.body, into_functions=False):
            if id(node) in self.refs:
                continue
            self.refs[id(node)] = self.visit(node)
        outputs = self.refs[id(main.body)]
        return self.plan(outputs, input_nodes)

    def visit(self, node: Expr) -> list[tuple[int, int]]:
        if isinstance(node, Constant):
            name = f"p{len(self.params)}"
            self.params[name] = np.ascontiguousarray(node.data)
            return self.add(GraphNode("param", name), _entry_types(node))
        if isinstance(node, Tuple):
            return [r for f in node.fields for r in self.refs[id(f)]]
        if isinstance(node, TupleGetItem):
            start = sum(len(flatten_tensor_types(t)) for t in
                        node.tuple_value.checked_type.fields[: node.index])  # type: ignore[union-attr]
            width = len(_entry_types(node))
            return self.refs[id(node.tuple_value)][start:start + width]
        if isinstance(node, Call) and isinstance(node.op, GlobalVar):
            args = [r for a in node.args for r in self.refs[id(a)]]
            types = _entry_types(node)
            return self.add(
                GraphNode("kernel", node.op.name_hint, args, node.op.name_hint, len(types)), types
            )
        if isinstance(node, GlobalVar):
            return []
        raise CompileError(
            f"graph executor: cannot execute {type(node).__name__} in main; "
            "was the module lowered (LowerTE) first?"
        )

    def plan(self, outputs: list[tuple[int, int]], input_nodes: list[int]) -> GraphPlan:
        row_ptr = [0]
        for types in self.types:
            row_ptr.append(row_ptr[-1] + len(types))
        entries: list[dict] = []
        for types in self.types:
            for t in types:
                entries.append({"shape": list(t.shape), "dtype": t.dtype, "storage_id": -1})
        storage = _plan_storage(self.nodes, self.types, row_ptr, outputs)
        for eid, sid in enumerate(storage):
            entries[eid]["storage_id"] = sid
        return GraphPlan(self.nodes, entries, row_ptr, outputs, input_nodes, self.params)


def _plan_storage(nodes: list[GraphNode], types: list[list[TensorType]], row_ptr: list[int],
                  outputs: list[tuple[int, int]]) -> list[int]:
    """Storage id per entry; kernel outputs share storage when lifetimes allow."""
    refcount: dict[int, int] = {}
    for n in nodes:
        for nid, idx in n.inputs:
            eid = row_ptr[nid] + idx
            refcount[eid] = refcount.get(eid, 0) + 1
    for nid, idx in outputs:
        refcount[row_ptr[nid] + idx] = refcount.get(row_ptr[nid] + idx, 0) + 1_000_000
    sizes: list[int] = []  # bytes per storage id
    free: list[int] = []
    assignment: list[int] = [-1] * row_ptr[-1]
    for nid, n in enumerate(nodes):
        for k, t in enumerate(types[nid]):
            eid = row_ptr[nid] + k
            need = max(t.nbytes, 1)
            if n.op == "kernel" and free:
                # best fit: the smallest free block that is big enough, else grow the largest
                fits = [s for s in free if sizes[s] >= need]
                sid = min(fits, key=lambda s: sizes[s]) if fits else max(free, key=lambda s: sizes[s])
                free.remove(sid)
                sizes[sid] = max(sizes[sid], need)
            else:
                sid = len(sizes)
                sizes.append(need)
            assignment[eid] = sid
        if n.op == "kernel":
            for nid_in, idx in {tuple(i) for i in n.inputs}:
                eid = row_ptr[nid_in] + idx
                refcount[eid] -= n.inputs.count((nid_in, idx))
                if refcount[eid] == 0 and nodes[nid_in].op == "kernel":
                    free.append(assignment[eid])
            for k in range(len(types[nid])):
                eid = row_ptr[nid] + k
                if refcount.get(eid, 0) == 0:
                    free.append(assignment[eid])  # an output nobody reads
    return assignment
