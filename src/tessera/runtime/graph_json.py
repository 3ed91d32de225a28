"""Checks the graph JSON of a library read back from a file, before the executor indexes into it.

A freshly built library's graph is trusted; one loaded from disk is
checked here so that a damaged or hand-edited graph gives an
`ArtifactError` naming the field at fault, not a KeyError or an
out-of-bounds pointer handed to a kernel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NotRequired, TypedDict, TypeGuard, TypeVar

import numpy as np

from ..errors import ArtifactError
from ..util.checked_json import decode_json
from .params_blob import checked_dtype

NODE_OPS = ("input", "param", "kernel", "view")
RESULT_OPS = ("kernel", "view")  # nodes whose entries live in the pool
MAX_ALIGNMENT = 4096  # allowance per pooled tensor: more than any alignment the memory planner uses

T = TypeVar("T")


class EntryJson(TypedDict):
    """One node output of the graph JSON."""

    shape: list[int]
    dtype: str
    storage_id: NotRequired[int]  # kernel results: the buffer they live in
    offset: NotRequired[int]  # kernel results of graphs with a "pool_size": byte offset in the pool


class NodeJson(TypedDict):
    """One node: an "input", a "param", a "kernel" call (which has the other fields), or a "view": a
    concatenation whose inputs were computed in its one entry (inputs, num_outputs, no call)."""

    op: str
    name: str
    func: NotRequired[str]
    num_outputs: NotRequired[int]
    inputs: NotRequired[list[list[int]]]  # [node id, output index] per argument
    scratch: NotRequired[list[list[int]]]  # [pool offset, bytes] per scratch argument
    ops: NotRequired[list[str]]  # the operators a kernel computes (for profiles); absent in older graphs


class SegmentJson(TypedDict):
    """Kernel calls one generated C function makes in order (see graph_codegen.Segment)."""

    func: str
    nodes: list[int]


class GraphJson(TypedDict):
    """The graph JSON a library holds (written by `graph_codegen.GraphPlan.to_json`)."""

    nodes: list[NodeJson]
    entries: list[EntryJson]  # node outputs, node after node
    node_row_ptr: list[int]  # node k's entries are entries[node_row_ptr[k]:node_row_ptr[k + 1]]
    outputs: list[list[int]]  # [node id, output index] per model output
    inputs: list[int]  # ids of the input nodes
    pool_size: NotRequired[int]  # absent in graphs older than the one memory pool
    segments: NotRequired[list[SegmentJson]]


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int  # JSON true/false are not counts


def _is_int_list(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(_is_int(v) for v in value)


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, where: str, problem: str) -> ArtifactError:
        return ArtifactError(f"{self.source}: {where}: {problem}")

    def require(self, ok: bool, where: str, problem: str) -> None:
        if not ok:
            raise self.error(where, problem)

    def obj(self, value: object, where: str, problem: str = "expected an object") -> dict[str, object]:
        if not isinstance(value, dict):
            raise self.error(where, problem)
        return value

    def int_list(self, value: object, where: str, length: int | None = None) -> list[int]:
        if not _is_int_list(value):
            raise self.error(where, f"got {str(value)[:60]}, expected a list of integers")
        self.require(length is None or len(value) == length, where, f"got {len(value)} items, expected {length}")
        return value

    def field(self, doc: Mapping[str, object], key: str, kind: type[T], where: str) -> T:
        self.require(key in doc, where, f"missing field {key!r}")
        value = doc[key]
        if not isinstance(value, kind) or (kind is int and not _is_int(value)):
            raise self.error(f"{where}.{key}", f"got {str(value)[:60]}, expected {kind.__name__}")
        return value


def parse_graph_json(data: bytes, source: str) -> GraphJson:
    """The graph of a library file, checked for shape (`source` names it in errors).

    Built from the checked values only: fields the loader does not read
    (such as "version", or the storage of inputs and parameters) are left out.
    """
    doc = decode_json(data, source)
    c = _Checker(source)
    top = c.obj(doc, "top level", f"got {type(doc).__name__}, expected an object")
    nodes: list[object] = c.field(top, "nodes", list, "graph")
    entries: list[object] = c.field(top, "entries", list, "graph")
    row_ptr = c.int_list(c.field(top, "node_row_ptr", list, "graph"), "node_row_ptr", len(nodes) + 1)
    c.require(row_ptr[0] == 0 and row_ptr[-1] == len(entries) and all(a <= b for a, b in zip(row_ptr, row_ptr[1:])),
              "node_row_ptr", f"expected a rising sequence from 0 to {len(entries)} (the entry count)")
    pool_size = c.field(top, "pool_size", int, "graph") if "pool_size" in top else None
    c.require(pool_size is None or pool_size >= 0, "pool_size", "negative")
    checked_nodes: list[NodeJson] = []
    checked_entries: list[EntryJson] = []  # node after node: in order, as node_row_ptr rises from 0 to the end
    pooled = 0
    for nid, node in enumerate(nodes):
        checked, node_entries, node_pooled = _check_node(c, node, nid, row_ptr, entries, pool_size)
        checked_nodes.append(checked)
        checked_entries += node_entries
        pooled += node_pooled
    # the pool holds kernel results and scratch, each aligned: a larger one is damage, not a plan
    c.require(pool_size is None or pool_size <= pooled, "pool_size",
              f"got {pool_size}, more than the {pooled} bytes its tensors and their alignment can need")
    outputs: list[object] = c.field(top, "outputs", list, "graph")
    refs = [_check_ref(c, out, f"outputs[{k}]", len(nodes), row_ptr) for k, out in enumerate(outputs)]
    _check_views(c, checked_nodes, checked_entries, row_ptr, refs, pool_size)
    graph = GraphJson(nodes=checked_nodes, entries=checked_entries, node_row_ptr=row_ptr, outputs=refs,
                      inputs=c.int_list(c.field(top, "inputs", list, "graph"), "inputs"))
    for k, nid in enumerate(graph["inputs"]):
        c.require(0 <= nid < len(nodes) and checked_nodes[nid]["op"] == "input", f"inputs[{k}]",
                  f"got node {nid}, expected the id of an input node")
    if pool_size is not None:
        graph["pool_size"] = pool_size
    if "segments" in top:
        segments: list[object] = c.field(top, "segments", list, "graph")
        graph["segments"] = [_check_segment(c, seg, f"segments[{k}]", checked_nodes) for k, seg in enumerate(segments)]
    return graph


def _check_views(c: _Checker, nodes: list[NodeJson], entries: list[EntryJson], row_ptr: list[int],
                 outputs: list[list[int]], pool_size: int | None) -> None:
    """Each view's inputs are results of other nodes, placed one after the other, in order, exactly over its
    entry (else its kernels would write elsewhere than its readers read: in the pool, but wrong); each
    such input belongs to one view, and neither is a graph output (those are handed out in arrays of
    their own)."""
    placed: set[int] = set()
    handed_out = {row_ptr[n] + i for n, i in outputs}
    for nid, node in enumerate(nodes):
        if node["op"] != "view":
            continue
        where = f"nodes[{nid}]"
        k = row_ptr[nid]
        view = entries[k]
        c.require(pool_size is not None, where, "a view needs a graph with a pool_size")
        at = view.get("offset", -1)
        for j, (n, i) in enumerate(node.get("inputs", [])):
            part = row_ptr[n] + i
            e = entries[part]
            c.require(nodes[n]["op"] in RESULT_OPS and e["dtype"] == view["dtype"]
                      and e.get("storage_id") == view.get("storage_id") and e.get("offset") == at,
                      f"{where}.inputs[{j}]", f"expected a result of the view's dtype placed at byte {at} of its "
                      f"storage {view.get('storage_id')}")
            c.require(part not in placed and part not in handed_out, f"{where}.inputs[{j}]",
                      "a view's input is placed in no other view and is no graph output")
            placed.add(part)
            at += _entry_bytes(c, e["shape"], e["dtype"], f"entries[{part}]")
        size = _entry_bytes(c, view["shape"], view["dtype"], f"entries[{k}]")
        c.require(bool(node.get("inputs")) and at == view.get("offset", -1) + size and k not in handed_out, where,
                  "a view's inputs fill its entry exactly, and it is no graph output")


def _check_segment(c: _Checker, raw: object, where: str, nodes: list[NodeJson]) -> SegmentJson:
    seg = c.obj(raw, where)
    func = c.field(seg, "func", str, where)
    members = c.int_list(c.field(seg, "nodes", list, where), f"{where}.nodes")
    c.require(bool(members) and all(0 <= n < len(nodes) and nodes[n]["op"] == "kernel" for n in members),
              f"{where}.nodes", "expected a non-empty list of kernel node ids")
    return SegmentJson(func=func, nodes=members)


def _check_ref(c: _Checker, ref: object, where: str, upto: int, row_ptr: list[int]) -> list[int]:
    """`ref` is [node id, output index] of a node before `upto`."""
    nid, index = checked = c.int_list(ref, where, 2)
    c.require(0 <= nid < upto and 0 <= index < row_ptr[nid + 1] - row_ptr[nid], where,
              f"got [{nid}, {index}], expected an output of one of the nodes 0..{upto - 1}")
    return checked


def _check_node(c: _Checker, raw: object, nid: int, row_ptr: list[int], entries: list[object],
                pool_size: int | None) -> tuple[NodeJson, list[EntryJson], int]:
    """One node and its entries, checked; with the most pool bytes they can take (alignment included)."""
    where = f"nodes[{nid}]"
    pooled = 0
    node = c.obj(raw, where)
    op = c.field(node, "op", str, where)
    c.require(op in NODE_OPS, f"{where}.op", f"got {op!r}, expected one of {', '.join(NODE_OPS)}")
    name = c.field(node, "name", str, where)
    node_entries = []
    for k in range(row_ptr[nid], row_ptr[nid + 1]):
        entry, nbytes = _check_entry(c, entries[k], k, where, op in RESULT_OPS, pool_size)
        node_entries.append(entry)
        if op in RESULT_OPS:
            pooled += nbytes + MAX_ALIGNMENT
    if op not in RESULT_OPS:
        c.require(row_ptr[nid + 1] - row_ptr[nid] == 1, where, "an input or parameter has exactly one entry")
        return NodeJson(op=op, name=name), node_entries, 0
    if op == "view":
        c.require(row_ptr[nid + 1] - row_ptr[nid] == 1 and node.get("num_outputs") == 1, where,
                  "a view has exactly one entry")
        c.require("func" not in node and "scratch" not in node, where, "a view calls nothing")
        parts: list[object] = c.field(node, "inputs", list, where)
        placed = [_check_ref(c, ref, f"{where}.inputs[{k}]", nid, row_ptr) for k, ref in enumerate(parts)]
        return NodeJson(op=op, name=name, num_outputs=1, inputs=placed), node_entries, 0
    func = c.field(node, "func", str, where)
    num_outputs = c.field(node, "num_outputs", int, where)
    c.require(num_outputs == row_ptr[nid + 1] - row_ptr[nid], f"{where}.num_outputs", "does not match node_row_ptr")
    refs: list[object] = c.field(node, "inputs", list, where)
    inputs = [_check_ref(c, ref, f"{where}.inputs[{k}]", nid, row_ptr) for k, ref in enumerate(refs)]
    scratch: list[object] = c.field(node, "scratch", list, where) if "scratch" in node else []
    ranges = []
    for k, raw_range in enumerate(scratch):
        offset, size = checked = c.int_list(raw_range, f"{where}.scratch[{k}]", 2)
        c.require(pool_size is not None and 0 <= offset and 0 <= size and offset + size <= pool_size,
                  f"{where}.scratch[{k}]", f"got [{offset}, {size}], expected a range inside the pool")
        ranges.append(checked)
        pooled += size + MAX_ALIGNMENT
    kernel = NodeJson(op=op, name=name, func=func, num_outputs=num_outputs, inputs=inputs, scratch=ranges)
    if "ops" in node:
        ops: list[object] = c.field(node, "ops", list, where)
        c.require(all(isinstance(o, str) for o in ops), f"{where}.ops", "expected a list of operator names")
        kernel["ops"] = [str(o) for o in ops]
    return kernel, node_entries, pooled


def _entry_bytes(c: _Checker, shape: list[int], dtype: str, where: str) -> int:
    """The bytes of an entry of `shape` and `dtype` (a dtype the library may hold, else ArtifactError)."""
    return math.prod(shape) * checked_dtype(dtype, f"{c.source}: {where}.dtype").itemsize


def _check_entry(c: _Checker, raw: object, k: int, node_where: str, kernel_result: bool,
                 pool_size: int | None) -> tuple[EntryJson, int]:
    """Entry `k` (shape and dtype; for a kernel result, its place in the pool) and its byte size."""
    where = f"entries[{k}] (of {node_where})"
    entry = c.obj(raw, where)
    shape = c.int_list(c.field(entry, "shape", list, where), f"{where}.shape")
    c.require(all(d >= 0 for d in shape), f"{where}.shape", f"negative dimension in {shape}")
    dtype = c.field(entry, "dtype", str, where)
    nbytes = _entry_bytes(c, shape, dtype, where)
    checked = EntryJson(shape=shape, dtype=dtype)
    if not kernel_result:
        return checked, nbytes
    storage_id = entry.get("storage_id")
    if not (_is_int(storage_id) and storage_id >= 0):
        raise c.error(f"entries[{k}].storage_id", "expected a storage id >= 0")
    checked["storage_id"] = storage_id
    if pool_size is not None:
        offset = entry.get("offset")
        if not (_is_int(offset) and 0 <= offset and offset + nbytes <= pool_size):
            raise c.error(f"entries[{k}].offset",
                          f"got {offset}, expected a place for {nbytes} bytes inside the {pool_size}-byte pool")
        checked["offset"] = offset
    return checked, nbytes


def check_params(graph: GraphJson, params: Mapping[str, np.ndarray], source: str) -> None:
    """Every parameter node of `graph` has an array in `params` with its entry's size and dtype."""
    row_ptr, entries = graph["node_row_ptr"], graph["entries"]
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] != "param":
            continue
        entry = entries[row_ptr[nid]]
        value = params.get(node["name"])
        if value is None:
            raise ArtifactError(f"{source}: parameter {node['name']!r} of the graph is missing from the parameters")
        if value.size != math.prod(entry["shape"]) or value.dtype.name != entry["dtype"]:
            raise ArtifactError(f"{source}: parameter {node['name']!r} is {value.dtype.name}{list(value.shape)}, "
                                f"the graph expects {entry['dtype']}{entry['shape']}")
