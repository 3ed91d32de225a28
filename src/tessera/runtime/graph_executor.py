"""The graph executor: runs a JSON graph of kernels from a shared library.

Every kernel result and kernel scratch has the offset the memory planner
gave it in one pool (see graph_storage.py); each kernel call's argument
pointers are computed up front, so a run is a loop of C calls.

Thread safety. The one-call run, `gm(*inputs)` (and `lib(*inputs)`), may be
called from many threads at once, as an onnxruntime session's `run` may:
each call runs in a workspace of its own. The stateful `set_input` / `run`
/ `get_output` share one set of buffers per GraphModule and are not
thread-safe: give each thread its own GraphModule, or hold a lock around
the whole sequence.

Kernels of host builds run their parallel loops on OpenMP threads:
`num_threads` (or the TESSERA_NUM_THREADS environment variable) sets how
many for this module's runs; by default OpenMP decides (OMP_NUM_THREADS, else
one per core). OpenMP keeps that setting per calling thread, so every run
sets it again in the thread it runs on, and on Linux binds the pool's other
threads each to a CPU other than the caller's (unless OMP_PROC_BIND,
OMP_PLACES or GOMP_CPU_AFFINITY is set; crt/src/threads.c says why). With
more than one thread, a run uses all of them or one, whichever recent runs
found faster (other processes busy on the cores make the threads take turns
on one: thread_choice.py); `adaptive_threads=False` always uses all.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from ..errors import RuntimeExecutionError, did_you_mean
from .graph_json import GraphJson
from .graph_library import GraphExecutorLibrary
from .graph_storage import Call, GraphLayout, Workspace, kernel_failure
from .shared_library import SharedLibrary
from .thread_choice import ThreadChoice


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


def _openmp_threads(shared: SharedLibrary) -> int | None:
    """The threads OpenMP gives this library's loops by default (None: it has no thread support)."""
    if not shared.has_symbol("TSSetNumThreads"):
        return None
    fn = shared.kernel("TSSetNumThreads")
    fn.argtypes = [ctypes.c_int32]
    return int(fn(0))  # 0 sets nothing, only answers


def _thread_setter(shared: SharedLibrary, count: int | None) -> Callable[[], object]:
    """What `run` calls first: sets the library's thread count (nothing when OpenMP decides)."""
    if count is None:
        return lambda: None
    if not shared.has_symbol("TSSetNumThreads"):
        if count == 1:
            return lambda: None
        raise RuntimeExecutionError(
            f"num_threads={count}: this library has no thread support (built by an older tessera or for "
            "another target); rebuild it for the host target `c`"
        )
    fn = shared.kernel("TSSetNumThreads")
    fn.argtypes = [ctypes.c_int32]
    return functools.partial(fn, count)


def _thread_waker(shared: SharedLibrary) -> Callable[[], object]:
    """What `profile` calls before timing a kernel: wakes the OpenMP pool (nothing where the library has none,
    or was built before TSWakeThreads)."""
    if not shared.has_symbol("TSWakeThreads"):
        return lambda: None
    fn = shared.kernel("TSWakeThreads")
    fn.argtypes, fn.restype = [], None
    return fn


def _run_calls(calls: list[Call]) -> None:
    for name, call in calls:
        status = call()  # a segment raises for its failing kernel itself
        if status != 0:
            raise kernel_failure(name, status)


class GraphModule:
    """Executes a built library: `gm(*inputs)` once, or `set_input`, `run`, `get_output`.

    `gm(*inputs, **named)` returns the outputs and is safe to call from any
    number of threads at once. Each call takes an idle workspace (a memory
    pool for the intermediates) or makes one when all are busy, so calls
    never wait for each other; the module keeps as many workspaces as calls
    ever ran at the same time. A call reads the caller's input arrays in
    place when they already have the input's dtype and are C-contiguous
    (copying the others; they must not change while the call runs), and
    writes every output to a new array it returns. Per-call buffers rather
    than a lock, because a lock would run the calls one after the other
    (the kernels release the GIL, so workspaces let calls use every core).
    The price is one pool per concurrent call and about 5 us a call (the
    free list, binding the caller's arrays): 26 us instead of 21 us for a
    model whose kernels take 17 us, measured on one thread.

    `set_input` / `run` / `get_output` (and `profile`, `benchmark`) work on
    one set of inputs, intermediates and outputs per module. They are not
    thread-safe: use one GraphModule per thread, or a lock around the whole
    set_input-run-get_output sequence.
    """

    def __init__(self, lib: GraphExecutorLibrary, num_threads: int | None = None,
                 adaptive_threads: bool = True) -> None:
        # `lib` is what tessera.build returns (or load_module loads)
        lib.shared_library.check_cpu()
        most = self._most_threads = _thread_count(num_threads)
        self._set_threads = _thread_setter(lib.shared_library, most)
        if most is None and adaptive_threads:  # OpenMP's default count, still chosen against one
            most = _openmp_threads(lib.shared_library)
        # runs choose between `most` threads and one (thread_choice.py)
        self._thread_choice = ThreadChoice(most) if adaptive_threads and most is not None and most > 1 else None
        self._thread_setters = {c: _thread_setter(lib.shared_library, c)
                                for c in (self._thread_choice.counts if self._thread_choice else ())}
        # a built library's graph is trusted; a loaded one's was checked by load_module (graph_json.py)
        self._graph: GraphJson = json.loads(lib.graph_json)
        self._layout = GraphLayout(self._graph, lib.params, lib.find_function)
        self._idle: list[Workspace] = []  # workspaces of the one-call run not in use
        self._lock = threading.Lock()  # guards `_idle` and the creation of `_state`
        self._stateful: Workspace | None = None
        self._profile_calls: list[Call] | None = None
        self._wake_threads = _thread_waker(lib.shared_library)
        # a tail of data-dependent shapes run after the graph (runtime/output_stage.py)
        self._stage = lib.output_stage
        self._run_stage = lib.find_dynamic_function(self._stage.function) if self._stage is not None else None
        self._staged: list[np.ndarray] | None = None  # the stateful run's final outputs

    @property
    def _state(self) -> Workspace:
        """The buffers of the stateful interface, made on first use."""
        if self._stateful is None:
            with self._lock:
                if self._stateful is None:
                    self._stateful = Workspace(self._layout, own_inputs=True)
        return self._stateful

    # ------------------------------------------------------------------ API
    @property
    def input_names(self) -> list[str]:
        return list(self._layout.input_index)

    def input_shape(self, key: str | int) -> tuple[int, ...]:
        return self._layout.entries[self._input_entry(key)].shape

    def input_dtype(self, key: str | int) -> str:
        return self._layout.entries[self._input_entry(key)].dtype.name

    @property
    def num_outputs(self) -> int:
        if self._stage is not None:
            return len(self._stage.outputs)
        return len(self._layout.outputs)

    def _finish(self, outputs: list[np.ndarray]) -> list[np.ndarray]:
        """The final outputs: the graph's, or the output stage's built from them."""
        if self._stage is None or self._run_stage is None:
            return outputs
        return self._stage.apply(outputs, self._run_stage)

    def _input_entry(self, key: str | int) -> int:
        """The entry index of input `key` (its position or its name)."""
        inputs = self._layout.input_entries
        if isinstance(key, int):
            if not 0 <= key < len(inputs):
                raise RuntimeExecutionError(f"input index {key} out of range (model has {len(inputs)})")
            return inputs[key]
        index = self._layout.input_index
        if key not in index:
            raise RuntimeExecutionError(
                f"model has no input {key!r}{did_you_mean(key, index)}; inputs: {', '.join(index)}"
            )
        return inputs[index[key]]

    def _checked(self, key: str | int, value: object) -> tuple[int, np.ndarray]:
        """The entry of input `key` and `value` as an array of its shape, of a dtype it may take."""
        entry = self._input_entry(key)
        spec = self._layout.entries[entry]
        arr = np.asarray(value)
        if arr.shape != spec.shape:
            raise RuntimeExecutionError(f"input {key!r}: got shape {arr.shape}, expected {spec.shape}")
        if arr.dtype != spec.dtype and not np.can_cast(arr.dtype, spec.dtype, casting="same_kind"):
            raise RuntimeExecutionError(f"input {key!r}: got dtype {arr.dtype}, expected {spec.dtype}")
        return entry, arr

    def set_input(self, key: str | int | None = None, value: np.ndarray | None = None, **named: np.ndarray) -> None:
        """Copy inputs into this module's input buffers (not thread-safe, see the class)."""
        items: list[tuple[str | int, np.ndarray | None]] = list(named.items())
        if key is not None:
            items.insert(0, (key, value))
        state = self._state
        for k, v in items:
            entry, arr = self._checked(k, v)
            state.array(entry)[...] = arr

    def run(self, **inputs: np.ndarray) -> None:
        """Run on the inputs set so far (`inputs` are set first); not thread-safe, see the class."""
        for name, value in inputs.items():  # (by name and value: an input may be called "key" or "value")
            self.set_input(name, value)
        self._execute(self._state.calls)
        if self._stage is not None:
            self._staged = self._finish([self._state.array(e) for e in self._layout.outputs])

    def _execute(self, calls: list[Call]) -> None:
        choice = self._thread_choice
        if choice is None:
            self._set_threads()
            _run_calls(calls)
            return
        threads = choice.choose()
        self._thread_setters[threads]()
        start = time.perf_counter()
        _run_calls(calls)
        choice.record(threads, time.perf_counter() - start)

    @property
    def threads_chosen(self) -> int | None:
        """The thread count runs use now (None: OpenMP decides); see thread_choice.py."""
        if self._thread_choice is None:
            return self._most_threads
        return self._thread_choice.best()

    @property
    def threads_settled(self) -> bool:
        """Have runs timed every thread count they choose between (thread_choice.py)? Until then the next
        run may be one of the first tries at one thread; afterwards tries come only now and then. Benchmarks
        run a module until this holds (WARM_UP + BURST + 1 runs from its first) to time its steady state."""
        return self._thread_choice is None or self._thread_choice.settled

    def get_output(self, index: int) -> np.ndarray:
        if not 0 <= index < self.num_outputs:
            raise RuntimeExecutionError(f"output index {index} out of range (model has {self.num_outputs})")
        if self._stage is not None:
            if self._staged is None:
                raise RuntimeExecutionError("no outputs yet: call run() first")
            return self._staged[index].copy()
        return self._state.array(self._layout.outputs[index]).copy()

    def get_input(self, key: str | int) -> np.ndarray:
        return self._state.array(self._input_entry(key)).copy()

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> list[np.ndarray]:
        """Run once on these inputs (by position, then by name) and return the outputs; thread-safe."""
        bound = self._call_inputs(args, kwargs)
        layout = self._layout
        workspace = self._acquire()
        try:
            for entry, arr in bound.items():
                workspace.bind(entry, arr)
            for entry in layout.computed_outputs:
                spec = layout.entries[entry]
                workspace.bind(entry, np.empty(spec.shape, spec.dtype))
            self._execute(workspace.calls)
            outputs = [workspace.array(entry) for entry in layout.outputs]
        finally:
            workspace.forget((*bound, *layout.computed_outputs))  # keep no caller's array alive
            self._release(workspace)
        # the caller's own input, a shared parameter, or an output listed twice: a copy
        seen: set[int] = set()
        for k, entry in enumerate(layout.outputs):
            if entry in seen or layout.entries[entry].offset < 0:
                outputs[k] = outputs[k].copy()
            seen.add(entry)
        return self._finish(outputs)

    def _call_inputs(self, args: tuple, kwargs: dict) -> dict[int, np.ndarray]:
        """Entry index -> array for a one-call run: the caller's array itself when the kernels can read it."""
        bound: dict[int, np.ndarray] = {}
        for key, value in (*enumerate(args), *kwargs.items()):
            entry, arr = self._checked(key, value)
            if entry in bound:
                raise RuntimeExecutionError(f"input {key!r} is given twice")
            if arr.dtype != self._layout.entries[entry].dtype or not (arr.flags.c_contiguous and arr.flags.aligned):
                arr = np.ascontiguousarray(arr, dtype=self._layout.entries[entry].dtype)
            bound[entry] = arr
        if len(bound) != len(self._layout.input_entries):
            missing = [name for name in self.input_names if self._input_entry(name) not in bound]
            raise RuntimeExecutionError(f"inputs not given: {', '.join(missing)} "
                                        f"(the model takes {', '.join(self.input_names)})")
        return bound

    def _acquire(self) -> Workspace:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Workspace(self._layout, own_inputs=False)

    def _release(self, workspace: Workspace) -> None:
        with self._lock:
            self._idle.append(workspace)

    def profile(self, repeat: int = 3) -> list[tuple[str, float]]:
        """Median seconds per kernel call, in execution order (not thread-safe, see the class). Each call is
        timed on its own, its OpenMP pool woken just before (TSWakeThreads), as a run's kernels find it."""
        import time

        if self._profile_calls is None:
            self._profile_calls = self._state.bind_steps(self._layout.kernel_steps)
        calls = self._profile_calls
        samples: list[list[float]] = [[] for _ in calls]
        self.run()
        for _ in range(repeat):
            self._set_threads()
            for k, (name, call) in enumerate(calls):
                self._wake_threads()  # (its pool would be asleep after the Python between calls: threads.c)
                t0 = time.perf_counter()
                status = call()
                if status != 0:
                    raise kernel_failure(name, status)
                samples[k].append(time.perf_counter() - t0)
        return [(name, sorted(s)[len(s) // 2]) for (name, _), s in zip(calls, samples)]

    def kernel_operators(self) -> list[tuple[str, ...]]:
        """The operators each kernel computes, in `profile`'s order (empty for graphs that do not record them)."""
        return [tuple(n.get("ops", ())) for n in self._graph["nodes"] if n["op"] == "kernel"]

    def benchmark(self, repeat: int = 10, min_seconds: float = 0.0) -> list[float]:
        import time

        times = []
        self.run()
        for _ in range(repeat):
            t0 = time.perf_counter()
            self.run()
            times.append(time.perf_counter() - t0)
        return times
