"""The graph executor: runs a JSON graph of kernels from a shared library.

Storage is allocated once per GraphModule: one pool, where every kernel
result and kernel scratch has the offset the memory planner gave it (older
graphs without "pool_size" get one array per storage id). Each kernel
call's argument pointers are computed up front, so `run()` is a loop of C
calls.

Kernels of host builds run their parallel loops on OpenMP threads:
`num_threads` (or the TESSERA_NUM_THREADS environment variable) sets how
many for this module's runs; by default OpenMP decides (OMP_NUM_THREADS, else
one per core).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..crt.status import describe
from ..errors import KernelFailure, RuntimeExecutionError, did_you_mean

ALIGNMENT = 64


def _aligned_bytes(nbytes: int) -> np.ndarray:
    raw = np.zeros(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    return raw[offset:offset + nbytes]


def _bind_call(fn: object, ins: list[np.ndarray], outs: list[np.ndarray]) -> Callable[[], int]:
    """A no-argument call of `fn` on fixed storage (pointers computed once)."""
    if isinstance(fn, ctypes._CFuncPtr):
        args = tuple(a.ctypes.data for a in ins + outs)
        fn.argtypes = [ctypes.c_void_p] * len(args)
        return functools.partial(fn, *args)

    def external() -> int:
        fn(ins, outs)  # type: ignore[operator]
        return 0

    return external


def _thread_count(requested: int | None) -> int | None:
    if requested is None:
        text = os.environ.get("TESSERA_NUM_THREADS")
        if not text:
            return None
        try:
            requested = int(text)
        except ValueError:
            raise RuntimeExecutionError(f"TESSERA_NUM_THREADS={text!r} is not a whole number of threads") from None
    if requested < 1:
        raise RuntimeExecutionError(f"num_threads must be at least 1, got {requested}")
    return requested


def _thread_setter(lib: "object", count: int | None) -> Callable[[], object]:
    """What `run` calls first: sets the library's thread count (nothing when OpenMP decides)."""
    if count is None:
        return lambda: None
    shared = getattr(lib, "shared_library", None)
    if shared is None or not shared.has_symbol("TSSetNumThreads"):
        if count == 1:
            return lambda: None
        raise RuntimeExecutionError(
            f"num_threads={count}: this library has no thread support (built by an older tessera or for "
            "another target); rebuild it for the host target `c`"
        )
    fn = shared.kernel("TSSetNumThreads")
    fn.argtypes = [ctypes.c_int32]
    return functools.partial(fn, count)


def _kernel_failure(kernel: str, status: int) -> KernelFailure:
    return KernelFailure(f"kernel {kernel}: {describe(status)}", kernel, status)


def _segment_call(fn: ctypes._CFuncPtr, table: int, kernels: list[str]) -> Callable[[], int]:
    """One segment's call; a failing kernel raises, named by the segment's out-parameter."""
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]

    def call() -> int:
        failed = ctypes.c_int32(0)  # per call: runs on other threads have their own
        status = fn(table, ctypes.byref(failed))
        if status != 0:
            raise _kernel_failure(kernels[failed.value - 1] if 0 < failed.value <= len(kernels) else "?", status)
        return 0

    return call


class GraphModule:
    """Executes a built library: `set_input`, `run`, `get_output`."""

    def __init__(self, lib: "object", num_threads: int | None = None) -> None:
        # `lib` is what tessera.build returns (or load_module loads)
        shared = getattr(lib, "shared_library", None)
        if shared is not None:
            shared.check_cpu()
        self._set_threads = _thread_setter(lib, _thread_count(num_threads))
        self._graph = json.loads(lib.graph_json)
        nodes = self._graph["nodes"]
        entries = self._graph["entries"]
        row_ptr = self._graph["node_row_ptr"]
        params: Mapping[str, np.ndarray] = lib.params
        pool = _aligned_bytes(max(int(self._graph.get("pool_size", 0)), 1)) if "pool_size" in self._graph else None
        sizes: dict[int, int] = {}
        for nid, node in enumerate(nodes):
            if node["op"] == "kernel":
                for k in range(row_ptr[nid], row_ptr[nid + 1]):
                    e = entries[k]
                    nbytes = int(np.prod(e["shape"], dtype=np.int64)) * np.dtype(e["dtype"]).itemsize
                    sizes[e["storage_id"]] = max(sizes.get(e["storage_id"], 0), nbytes)
        storage = {} if pool is not None else {sid: _aligned_bytes(max(n, 1)) for sid, n in sorted(sizes.items())}
        self._entries: list[np.ndarray] = []
        self._input_index: dict[str, int] = {}
        self._input_entries: list[int] = []
        for nid, node in enumerate(nodes):
            for k in range(row_ptr[nid], row_ptr[nid + 1]):
                e = entries[k]
                shape, dtype = tuple(e["shape"]), np.dtype(e["dtype"])
                if node["op"] == "kernel":
                    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                    if pool is not None:
                        arr = pool[e["offset"]:e["offset"] + nbytes].view(dtype).reshape(shape)
                    else:
                        arr = storage[e["storage_id"]][:nbytes].view(dtype).reshape(shape)
                elif node["op"] == "param":
                    if node["name"] not in params:
                        raise RuntimeExecutionError(f"parameter {node['name']} missing from the library")
                    arr = np.ascontiguousarray(params[node["name"]], dtype=dtype).reshape(shape)
                else:
                    arr = _aligned_bytes(max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1))
                    arr = arr[: int(np.prod(shape, dtype=np.int64)) * dtype.itemsize].view(dtype).reshape(shape)
                    self._input_index[node["name"]] = len(self._input_entries)
                    self._input_entries.append(k)
                self._entries.append(arr)
        self._calls: list[tuple[str, Callable[[], int]]] = []
        arguments: dict[int, list[np.ndarray]] = {}
        for nid, node in enumerate(nodes):
            if node["op"] != "kernel":
                continue
            ins = [self._entries[row_ptr[i] + j] for i, j in node["inputs"]]
            outs = [self._entries[k] for k in range(row_ptr[nid], row_ptr[nid + 1])]
            if pool is not None:
                outs += [pool[offset:offset + n] for offset, n in node.get("scratch", [])]
            arguments[nid] = ins + outs
            self._calls.append((node["func"], _bind_call(lib.find_function(node["func"]), ins, outs)))
        self._steps = self._segment_steps(lib, nodes, arguments)
        self._outputs = [row_ptr[n] + i for n, i in self._graph["outputs"]]

    def _segment_steps(self, lib: "object", nodes: list[dict],
                       arguments: dict[int, list[np.ndarray]]) -> list[tuple[list[str] | str, Callable[[], int]]]:
        """What `run` calls: one C call per segment of kernel calls (see graph_codegen.Segment),
        the single calls of kernels outside segments; (segment's kernel names or kernel name, call)."""
        segments = {seg["nodes"][0]: seg for seg in self._graph.get("segments", [])}
        kernel_nodes = [nid for nid, node in enumerate(nodes) if node["op"] == "kernel"]
        call_of = dict(zip(kernel_nodes, self._calls))
        self._keep: list[object] = []  # pointer tables the segments read
        steps: list[tuple[list[str] | str, Callable[[], int]]] = []
        covered: set[int] = set()
        for nid in kernel_nodes:
            if nid in covered:
                continue
            seg = segments.get(nid)
            if seg is None:
                steps.append(call_of[nid])
                continue
            table = [a.ctypes.data for n in seg["nodes"] for a in arguments[n]]
            pointers = (ctypes.c_void_p * max(len(table), 1))(*table)
            self._keep.append(pointers)
            kernels = [nodes[n]["func"] for n in seg["nodes"]]
            steps.append((kernels, _segment_call(lib.find_function(seg["func"]), ctypes.addressof(pointers), kernels)))
            covered.update(seg["nodes"])
        return steps

    # ------------------------------------------------------------------ API
    @property
    def input_names(self) -> list[str]:
        return list(self._input_index)

    def input_shape(self, key: str | int) -> tuple[int, ...]:
        return self._input_entry(key).shape

    def input_dtype(self, key: str | int) -> str:
        return self._input_entry(key).dtype.name

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def _input_entry(self, key: str | int) -> np.ndarray:
        if isinstance(key, int):
            if not 0 <= key < len(self._input_entries):
                raise RuntimeExecutionError(f"input index {key} out of range (model has {len(self._input_entries)})")
            return self._entries[self._input_entries[key]]
        if key not in self._input_index:
            raise RuntimeExecutionError(
                f"model has no input {key!r}{did_you_mean(key, self._input_index)}; "
                f"inputs: {', '.join(self._input_index)}"
            )
        return self._entries[self._input_entries[self._input_index[key]]]

    def set_input(self, key: str | int | None = None, value: np.ndarray | None = None, **named: np.ndarray) -> None:
        items = list(named.items())
        if key is not None:
            items.insert(0, (key, value))
        for k, v in items:
            dst = self._input_entry(k)
            arr = np.asarray(v)
            if arr.shape != dst.shape:
                raise RuntimeExecutionError(f"input {k!r}: got shape {arr.shape}, expected {dst.shape}")
            if arr.dtype != dst.dtype:
                if not np.can_cast(arr.dtype, dst.dtype, casting="same_kind"):
                    raise RuntimeExecutionError(f"input {k!r}: got dtype {arr.dtype}, expected {dst.dtype}")
            dst[...] = arr

    def run(self, **inputs: np.ndarray) -> None:
        if inputs:
            self.set_input(**inputs)
        self._set_threads()
        for names, call in self._steps:
            status = call()  # a segment raises for its failing kernel itself
            if status != 0:
                raise _kernel_failure(str(names), status)

    def get_output(self, index: int) -> np.ndarray:
        if not 0 <= index < len(self._outputs):
            raise RuntimeExecutionError(f"output index {index} out of range (model has {len(self._outputs)})")
        return self._entries[self._outputs[index]].copy()

    def get_input(self, key: str | int) -> np.ndarray:
        return self._input_entry(key).copy()

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> list[np.ndarray]:
        for k, a in enumerate(args):
            self.set_input(k, a)
        self.run(**kwargs)
        return [self.get_output(i) for i in range(self.num_outputs)]

    def profile(self, repeat: int = 3) -> list[tuple[str, float]]:
        """Median seconds per kernel call, in execution order."""
        import time

        samples: list[list[float]] = [[] for _ in self._calls]
        self.run()
        for _ in range(repeat):
            self._set_threads()
            for k, (name, call) in enumerate(self._calls):
                t0 = time.perf_counter()
                status = call()
                if status != 0:
                    raise _kernel_failure(name, status)
                samples[k].append(time.perf_counter() - t0)
        return [(name, sorted(s)[len(s) // 2]) for (name, _), s in zip(self._calls, samples)]

    def benchmark(self, repeat: int = 10, min_seconds: float = 0.0) -> list[float]:
        import time

        times = []
        self.run()
        for _ in range(repeat):
            t0 = time.perf_counter()
            self.run()
            times.append(time.perf_counter() - t0)
        return times
