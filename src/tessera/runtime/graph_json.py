"""Checks the graph JSON of a library read back from a file, before the executor indexes into it.

A freshly built library's graph is trusted; one loaded from disk is
checked here so that a damaged or hand-edited graph gives an
`ArtifactError` naming the field at fault, not a KeyError or an
out-of-bounds pointer handed to a kernel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..errors import ArtifactError
from ..util.checked_json import decode_json
from .params_blob import checked_dtype

NODE_OPS = ("input", "param", "kernel")
MAX_ALIGNMENT = 4096  # allowance per pooled tensor: more than any alignment the memory planner uses


def _is_int(value: object) -> bool:
    return type(value) is int  # JSON true/false are not counts


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def require(self, ok: bool, where: str, problem: str) -> None:
        if not ok:
            raise ArtifactError(f"{self.source}: {where}: {problem}")

    def int_list(self, value: object, where: str, length: int | None = None) -> list[int]:
        self.require(isinstance(value, list) and all(_is_int(v) for v in value), where,
                     f"got {str(value)[:60]}, expected a list of integers")
        self.require(length is None or len(value) == length, where, f"got {len(value)} items, expected {length}")
        return value  # type: ignore[return-value]

    def field(self, doc: Mapping, key: str, kind: type, where: str) -> object:
        self.require(key in doc, where, f"missing field {key!r}")
        value = doc[key]
        self.require(isinstance(value, kind) and not (kind is int and not _is_int(value)), f"{where}.{key}",
                     f"got {str(value)[:60]}, expected {kind.__name__}")
        return value


def parse_graph_json(data: bytes, source: str) -> dict:
    """The graph of a library file, checked for shape (`source` names it in errors)."""
    doc = decode_json(data, source)
    c = _Checker(source)
    c.require(isinstance(doc, dict), "top level", f"got {type(doc).__name__}, expected an object")
    nodes = c.field(doc, "nodes", list, "graph")
    entries = c.field(doc, "entries", list, "graph")
    row_ptr = c.int_list(c.field(doc, "node_row_ptr", list, "graph"), "node_row_ptr", len(nodes) + 1)
    c.require(row_ptr[0] == 0 and row_ptr[-1] == len(entries) and all(a <= b for a, b in zip(row_ptr, row_ptr[1:])),
              "node_row_ptr", f"expected a rising sequence from 0 to {len(entries)} (the entry count)")
    pool_size = c.field(doc, "pool_size", int, "graph") if "pool_size" in doc else None
    c.require(pool_size is None or pool_size >= 0, "pool_size", "negative")
    pooled = sum(_check_node(c, node, nid, nodes, row_ptr, entries, pool_size) for nid, node in enumerate(nodes))
    # the pool holds kernel results and scratch, each aligned: a larger one is damage, not a plan
    c.require(pool_size is None or pool_size <= pooled, "pool_size",
              f"got {pool_size}, more than the {pooled} bytes its tensors and their alignment can need")
    for k, out in enumerate(c.field(doc, "outputs", list, "graph")):  # type: ignore[arg-type]
        _check_ref(c, out, f"outputs[{k}]", len(nodes), row_ptr)
    for k, nid in enumerate(c.int_list(c.field(doc, "inputs", list, "graph"), "inputs")):
        c.require(0 <= nid < len(nodes) and nodes[nid]["op"] == "input", f"inputs[{k}]",
                  f"got node {nid}, expected the id of an input node")
    for k, seg in enumerate(c.field(doc, "segments", list, "graph") if "segments" in doc else []):
        where = f"segments[{k}]"
        c.require(isinstance(seg, dict), where, "expected an object")
        c.field(seg, "func", str, where)
        members = c.int_list(c.field(seg, "nodes", list, where), f"{where}.nodes")
        c.require(bool(members) and all(0 <= n < len(nodes) and nodes[n]["op"] == "kernel" for n in members),
                  f"{where}.nodes", "expected a non-empty list of kernel node ids")
    return doc


def _check_ref(c: _Checker, ref: object, where: str, upto: int, row_ptr: list[int]) -> None:
    """`ref` is [node id, output index] of a node before `upto`."""
    nid, index = c.int_list(ref, where, 2)
    c.require(0 <= nid < upto and 0 <= index < row_ptr[nid + 1] - row_ptr[nid], where,
              f"got [{nid}, {index}], expected an output of one of the nodes 0..{upto - 1}")


def _check_node(c: _Checker, node: object, nid: int, nodes: list, row_ptr: list[int], entries: list,
                pool_size: int | None) -> int:
    """Checks one node and its entries; the most pool bytes they can take (alignment included)."""
    where = f"nodes[{nid}]"
    pooled = 0
    c.require(isinstance(node, dict), where, "expected an object")
    op = c.field(node, "op", str, where)  # type: ignore[arg-type]
    c.require(op in NODE_OPS, f"{where}.op", f"got {op!r}, expected one of {', '.join(NODE_OPS)}")
    c.field(node, "name", str, where)
    for k in range(row_ptr[nid], row_ptr[nid + 1]):
        nbytes = _check_entry(c, entries[k], f"entries[{k}] (of {where})")
        if op != "kernel":
            continue
        pooled += nbytes + MAX_ALIGNMENT
        c.require(_is_int(entries[k].get("storage_id")) and entries[k]["storage_id"] >= 0,
                  f"entries[{k}].storage_id", "expected a storage id >= 0")
        if pool_size is not None:
            offset = entries[k].get("offset")
            c.require(_is_int(offset) and 0 <= offset and offset + nbytes <= pool_size, f"entries[{k}].offset",
                      f"got {offset}, expected a place for {nbytes} bytes inside the {pool_size}-byte pool")
    if op != "kernel":
        c.require(row_ptr[nid + 1] - row_ptr[nid] == 1, where, "an input or parameter has exactly one entry")
        return 0
    c.field(node, "func", str, where)
    c.require(c.field(node, "num_outputs", int, where) == row_ptr[nid + 1] - row_ptr[nid], f"{where}.num_outputs",
              "does not match node_row_ptr")
    for k, ref in enumerate(c.field(node, "inputs", list, where)):  # type: ignore[arg-type]
        _check_ref(c, ref, f"{where}.inputs[{k}]", nid, row_ptr)
    for k, scratch in enumerate(c.field(node, "scratch", list, where) if "scratch" in node else []):
        offset, size = c.int_list(scratch, f"{where}.scratch[{k}]", 2)
        c.require(pool_size is not None and 0 <= offset and 0 <= size and offset + size <= pool_size,
                  f"{where}.scratch[{k}]", f"got [{offset}, {size}], expected a range inside the pool")
        pooled += size + MAX_ALIGNMENT
    return pooled


def _check_entry(c: _Checker, entry: object, where: str) -> int:
    """The byte size of a checked entry (shape and dtype)."""
    c.require(isinstance(entry, dict), where, "expected an object")
    shape = c.int_list(c.field(entry, "shape", list, where), f"{where}.shape")  # type: ignore[arg-type]
    c.require(all(d >= 0 for d in shape), f"{where}.shape", f"negative dimension in {shape}")
    dtype = checked_dtype(c.field(entry, "dtype", str, where), f"{c.source}: {where}.dtype")  # type: ignore[arg-type]
    return math.prod(shape) * dtype.itemsize


def check_params(graph: dict, params: Mapping[str, np.ndarray], source: str) -> None:
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
