"""Storage for graph executor runs: what the graph needs, and one run's buffers.

`GraphLayout` is read once from the graph JSON and never changes: every
entry (node output) with its shape, dtype and place (an input, a
parameter, or an offset in the memory pool), and every step `run` calls
with the entries and scratch it passes. Older graphs without "pool_size"
get one pool region per storage id.

A `Workspace` is the memory of one run at a time: its own pool, and the
C-side argument lists (a pointer table per segment of kernel calls, an
address list per single kernel) computed once. Inputs and outputs can be
re-bound to other arrays before a run (`bind`): the argument lists are
patched in place, so a run can read the caller's arrays and write fresh
output arrays without a copy. Runs that may overlap in time need one
workspace each: that is what makes the one-call run thread-safe.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import dtype as dt
from ..crt.status import describe
from ..errors import KernelFailure, RuntimeExecutionError
from .external import ExternalFunction
from .graph_json import RESULT_OPS, EntryJson, GraphJson, NodeJson
from .shared_library import CFunction

ALIGNMENT = 64


def aligned_bytes(nbytes: int) -> np.ndarray:
    """`nbytes` zeroed bytes on a 64-byte boundary (large ones are mapped lazily by the OS)."""
    raw = np.zeros(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    return raw[offset:offset + nbytes]


@dataclass(frozen=True)
class Entry:
    """One node output: an input, a parameter, or a region of the pool."""

    shape: tuple[int, ...]
    dtype: np.dtype
    input_index: int | None = None  # for inputs: position among the model's inputs
    param: np.ndarray | None = None  # for parameters: the (shared, read-only) array
    offset: int = -1  # for kernel results: byte offset in the pool
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nbytes", math.prod(self.shape) * self.dtype.itemsize)


@dataclass(frozen=True)
class Scratch:
    """A kernel's scratch argument: `nbytes` at `offset` in the pool."""

    offset: int
    nbytes: int


Arg = int | Scratch  # an entry index, or scratch
AddressHolder = list[int] | ctypes.Array[ctypes.c_void_p]  # a kernel's argument addresses, or a segment's table
Call = tuple[str, Callable[[], int]]  # a step bound to a workspace: (its name, a call returning its status)


@dataclass(frozen=True)
class KernelStep:
    """One call `run` makes to a C function: a single kernel on its argument
    addresses, or a segment of kernel calls over one pointer table."""

    name: str  # the kernel, or the segment's C function
    func: CFunction
    args: tuple[Arg, ...]
    segment: tuple[str, ...] | None = None  # a segment's kernels (its failing call's number picks one)


@dataclass(frozen=True)
class ExternalStep:
    """One call `run` makes to an external module's function, on NumPy arrays."""

    name: str
    func: ExternalFunction
    args: tuple[Arg, ...]
    num_inputs: int  # external functions take (inputs, outputs) lists


Step = KernelStep | ExternalStep


class GraphLayout:
    """Everything about a graph's storage that does not change between runs."""

    def __init__(self, graph: GraphJson, params: Mapping[str, np.ndarray],
                 find_function: Callable[[str], CFunction | ExternalFunction]) -> None:
        nodes, entries, row_ptr = graph["nodes"], graph["entries"], graph["node_row_ptr"]
        offsets, self.pool_size = _offsets(graph, nodes, entries, row_ptr)
        self.entries: list[Entry] = []
        self.input_index: dict[str, int] = {}
        self.input_entries: list[int] = []
        for nid, node in enumerate(nodes):
            for k in range(row_ptr[nid], row_ptr[nid + 1]):
                e = entries[k]
                shape, dtype = tuple(e["shape"]), dt.to_numpy(e["dtype"])
                if node["op"] in RESULT_OPS:  # a kernel's result, or a view its inputs were computed in
                    entry = Entry(shape, dtype, offset=offsets[k])
                elif node["op"] == "param":
                    if node["name"] not in params:
                        raise RuntimeExecutionError(f"parameter {node['name']} missing from the library")
                    value = np.ascontiguousarray(params[node["name"]], dtype=dtype).reshape(shape)
                    entry = Entry(shape, dtype, param=value)
                else:
                    self.input_index[node["name"]] = len(self.input_entries)
                    entry = Entry(shape, dtype, input_index=len(self.input_entries))
                    self.input_entries.append(k)
                self.entries.append(entry)
        self.outputs: list[int] = [row_ptr[n] + i for n, i in graph["outputs"]]
        # outputs a kernel writes (each once): a one-call run gives them fresh arrays
        self.computed_outputs: tuple[int, ...] = tuple(dict.fromkeys(k for k in self.outputs if self.entries[k].offset >= 0))
        self.kernel_steps: list[Step] = []  # one per kernel node, for profiling
        node_args: dict[int, tuple[Arg, ...]] = {}
        for nid, node in enumerate(nodes):
            if node["op"] != "kernel":
                continue
            args: tuple[Arg, ...] = (*(row_ptr[i] + j for i, j in node["inputs"]),
                                     *range(row_ptr[nid], row_ptr[nid + 1]),
                                     *(Scratch(offset, n) for offset, n in node.get("scratch", [])))
            node_args[nid] = args
            self.kernel_steps.append(_kernel_step(node["func"], find_function(node["func"]), args, len(node["inputs"])))
        self.steps: list[Step] = _segment_steps(graph, nodes, node_args, self.kernel_steps, find_function)


def _offsets(graph: GraphJson, nodes: list[NodeJson], entries: list[EntryJson], row_ptr: list[int]
             ) -> tuple[dict[int, int], int]:
    """Pool offset of every kernel result, and the pool's size. Graphs from before
    "pool_size" get one region per storage id."""
    kernel_entries = [k for nid, node in enumerate(nodes) if node["op"] in RESULT_OPS
                      for k in range(row_ptr[nid], row_ptr[nid + 1])]
    if "pool_size" in graph:
        return {k: int(entries[k]["offset"]) for k in kernel_entries}, int(graph["pool_size"])
    sizes: dict[int, int] = {}
    for k in kernel_entries:
        e = entries[k]
        nbytes = math.prod(e["shape"]) * dt.to_numpy(e["dtype"]).itemsize
        sizes[e["storage_id"]] = max(sizes.get(e["storage_id"], 0), nbytes)
    start: dict[int, int] = {}
    at = 0
    for sid, n in sorted(sizes.items()):
        start[sid] = at
        at += -(-max(n, 1) // ALIGNMENT) * ALIGNMENT
    return {k: start[entries[k]["storage_id"]] for k in kernel_entries}, at


def _kernel_step(name: str, fn: CFunction | ExternalFunction, args: tuple[Arg, ...], num_inputs: int) -> Step:
    if isinstance(fn, CFunction):
        fn.argtypes = [ctypes.c_void_p] * len(args)  # set once here; runs only read it
        return KernelStep(name, fn, args)
    return ExternalStep(name, fn, args, num_inputs)


def _segment_steps(graph: GraphJson, nodes: list[NodeJson], node_args: Mapping[int, tuple[Arg, ...]],
                   kernel_steps: list[Step], find_function: Callable[[str], CFunction | ExternalFunction]
                   ) -> list[Step]:
    """What `run` calls: one C call per segment of kernel calls (see graph_codegen.Segment),
    the single calls of kernels outside segments."""
    segments = {seg["nodes"][0]: seg for seg in graph.get("segments", [])}
    step_of = dict(zip(node_args, kernel_steps))
    steps: list[Step] = []
    covered: set[int] = set()
    for nid in node_args:
        if nid in covered:
            continue
        seg = segments.get(nid)
        if seg is None:
            steps.append(step_of[nid])
            continue
        fn = find_function(seg["func"])
        if not isinstance(fn, CFunction):
            raise RuntimeExecutionError(f"segment {seg['func']!r} is not a C function of the library")
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]  # table, failing call (from 1)
        args = tuple(a for n in seg["nodes"] for a in node_args[n])
        steps.append(KernelStep(seg["func"], fn, args, segment=tuple(nodes[n]["func"] for n in seg["nodes"])))
        covered.update(seg["nodes"])
    return steps


class Workspace:
    """The buffers of one run at a time, and the steps' arguments pointing into them."""

    def __init__(self, layout: GraphLayout, own_inputs: bool) -> None:
        self.layout = layout
        self.pool = aligned_bytes(max(layout.pool_size, 1))
        self.arrays: list[np.ndarray | None] = []
        for e in layout.entries:
            if e.param is not None:
                self.arrays.append(e.param)
            elif e.input_index is not None:
                self.arrays.append(_own_array(e) if own_inputs else None)
            else:
                self.arrays.append(self.pool[e.offset:e.offset + e.nbytes].view(e.dtype).reshape(e.shape))
        # per entry, the places holding its address: (pointer table or address list, position)
        self._slots: dict[int, list[tuple[AddressHolder, int]]] = {}
        self.calls = self.bind_steps(layout.steps)

    def bind_steps(self, steps: Sequence[Step]) -> list[Call]:
        """No-argument calls of `steps` on this workspace: (step name, call returning a status)."""
        return [self._bind_step(s) for s in steps]

    def array(self, entry: int) -> np.ndarray:
        """The array entry `entry` lives in (one is bound to every entry while a run can read it)."""
        array = self.arrays[entry]
        if array is None:
            raise RuntimeExecutionError(f"entry {entry} has no array bound (an input of a one-call run, after it)")
        return array

    def _address(self, arg: Arg) -> int:
        if isinstance(arg, Scratch):
            return self.pool[arg.offset:].ctypes.data
        array = self.arrays[arg]
        return 0 if array is None else array.ctypes.data

    def _bind_step(self, step: Step) -> Call:
        if isinstance(step, ExternalStep):
            return step.name, self._external(step)
        fn = step.func
        if step.segment is not None:
            table = (ctypes.c_void_p * max(len(step.args), 1))()
            self._fill(table, step.args)
            return step.name, _segment_call(fn, table, step.segment)
        addresses = [0] * len(step.args)
        self._fill(addresses, step.args)
        return step.name, lambda: fn(*addresses)

    def _fill(self, holder: AddressHolder, args: tuple[Arg, ...]) -> None:
        """Put the addresses of `args` in `holder`, and remember where each entry's went (for `bind`)."""
        for k, arg in enumerate(args):
            holder[k] = self._address(arg)
            if not isinstance(arg, Scratch):
                self._slots.setdefault(arg, []).append((holder, k))

    def _external(self, step: ExternalStep) -> Callable[[], int]:
        def call() -> int:
            arrays = [self.pool[a.offset:a.offset + a.nbytes] if isinstance(a, Scratch) else self.array(a)
                      for a in step.args]
            step.func(arrays[:step.num_inputs], arrays[step.num_inputs:])
            return 0

        return call

    def forget(self, entries: Sequence[int]) -> None:
        """Drop the arrays bound to `entries` (their addresses stay: bind them again before a run)."""
        for entry in entries:
            self.arrays[entry] = None

    def bind(self, entry: int, array: np.ndarray | None) -> None:
        """Let entry `entry` live in `array` (C-contiguous, of its shape and dtype) for the next runs."""
        self.arrays[entry] = array
        address = 0 if array is None else array.ctypes.data
        for holder, k in self._slots.get(entry, ()):
            holder[k] = address


def kernel_failure(kernel: str, status: int) -> KernelFailure:
    return KernelFailure(f"kernel {kernel}: {describe(status)}", kernel, status)


def _segment_call(fn: CFunction, table: ctypes.Array[ctypes.c_void_p], kernels: tuple[str, ...]) -> Callable[[], int]:
    """One segment's call; a failing kernel raises, named by the segment's out-parameter."""
    def call() -> int:
        failed = ctypes.c_int32(0)  # per call: runs on other threads have their own
        status = fn(ctypes.addressof(table), ctypes.byref(failed))
        if status != 0:
            raise kernel_failure(kernels[failed.value - 1] if 0 < failed.value <= len(kernels) else "?", status)
        return 0

    return call


def _own_array(e: Entry) -> np.ndarray:
    return aligned_bytes(max(e.nbytes, 1))[:e.nbytes].view(e.dtype).reshape(e.shape)
