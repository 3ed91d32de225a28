"""The one-call run (`lib(x)`, `gm(x)`) from many threads at once; the stateful interface's rule."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.crt import INCLUDE_DIR, source
from tessera.errors import RuntimeExecutionError
from tessera.frontend import from_onnx

THREADS = 6
CALLS = 40


def _model(rows: int = 32) -> onnx.ModelProto:
    """Two outputs and intermediates in the pool, so calls sharing buffers would mix up their values."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["s"], axis=1), helper.make_node("MatMul", ["s", "w2"], ["y"]),
             helper.make_node("ReduceMax", ["h"], ["m"], axes=[1], keepdims=0)]
    graph = helper.make_graph(
        nodes, "threads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 16]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, [rows])], initializer=[w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _build(model: onnx.ModelProto, target: str = "c"):
    mod, params = from_onnx(model)
    return tessera.build(mod, target=target, params=params)


def _inputs(rows: int = 32, count: int = THREADS) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((rows, 64)).astype(np.float32) for _ in range(count)]


def _hammer(run: Callable[[int, np.ndarray], list[np.ndarray]], xs: list[np.ndarray],
            expected: list[list[np.ndarray]]) -> list[str]:
    """Every thread runs every input CALLS times (starting together); what came out wrong."""
    wrong: list[str] = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        start.wait()
        for call in range(CALLS):
            k = (t + call) % len(xs)
            got = run(t, xs[k])
            if any(not np.array_equal(a, b) for a, b in zip(got, expected[k], strict=True)):
                wrong.append(f"thread {t} call {call} input {k}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return wrong


@pytest.mark.parametrize("target", ["c", "blas"])  # tessera's kernels, and a library's
def test_library_call_is_thread_safe(target):
    lib = _build(_model(), target)
    xs = _inputs()
    expected = [lib(x) for x in xs]
    assert not _hammer(lambda t, x: lib(x), xs, expected)


def test_library_call_is_thread_safe_with_an_external_module():
    """Det, which tessera lacks, runs in onnxruntime (an external module) between C kernels."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "x"], ["a"]), helper.make_node("Det", ["a"], ["d"]),
         helper.make_node("Neg", ["d"], ["y"])], "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                            opaque_unsupported=True)
    lib = tessera.build(mod, target="onnxruntime", params=params)
    assert any(m.function_names() for m in lib.external_modules)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((8, 3, 3)).astype(np.float32) for _ in range(THREADS)]
    expected = [lib(x) for x in xs]
    assert not _hammer(lambda t, x: lib(x), xs, expected)


def test_graph_module_call_is_thread_safe_with_parallel_kernels():
    lib = _build(_model(rows=2048))  # big enough for the kernels' OpenMP loops
    gm = tessera.GraphModule(lib, num_threads=2)
    xs = _inputs(rows=2048, count=3)
    expected = [gm(x) for x in xs]
    assert not _hammer(lambda t, x: gm(x=x) if t % 2 else gm(x), xs, expected)


def test_one_graph_module_per_thread_is_the_rule_for_set_input_run_get_output():
    lib = _build(_model())
    xs = _inputs()
    expected = [lib(x) for x in xs]
    modules = [tessera.GraphModule(lib) for _ in range(THREADS)]

    def stateful(t: int, x: np.ndarray) -> list[np.ndarray]:
        gm = modules[t]
        gm.set_input("x", x)
        gm.run()
        return [gm.get_output(i) for i in range(gm.num_outputs)]

    assert not _hammer(stateful, xs, expected)


def test_aot_host_runner_runs_from_many_threads():
    mod, params = from_onnx(_model())
    lib = tessera.build(mod, params=params, executor="aot", mod_name="threads")
    xs = _inputs(count=2)
    expected = [lib.run_host([x]) for x in xs]
    results: dict[int, list[np.ndarray]] = {}

    def work(t: int) -> None:
        results[t] = lib.run_host([xs[t % 2]])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2, 3]
    for t, got in results.items():
        for a, b in zip(got, expected[t % 2], strict=True):
            np.testing.assert_array_equal(a, b)


def test_one_call_runs_leave_the_stateful_buffers_alone():
    lib = _build(_model())
    x0, x1 = _inputs(count=2)
    gm = tessera.GraphModule(lib)
    gm.set_input("x", x0)
    gm.run()
    before = [gm.get_output(i) for i in range(2)]
    other = gm(x1)
    assert not np.array_equal(other[0], before[0])
    for i in range(2):
        np.testing.assert_array_equal(gm.get_output(i), before[i])
    np.testing.assert_array_equal(gm.get_input("x"), x0)


def test_one_call_returns_new_arrays_and_leaves_the_inputs_unchanged():
    lib = _build(_model())
    (x,) = _inputs(count=1)
    kept = x.copy()
    first, second = lib(x), lib(x)
    for a, b in zip(first, second):
        assert not np.shares_memory(a, b)
        np.testing.assert_array_equal(a, b)
    first[0][...] = 0  # the caller owns its outputs
    np.testing.assert_array_equal(lib(x)[0], second[0])
    np.testing.assert_array_equal(x, kept)
    # inputs of another dtype or layout are converted, as set_input converts them
    np.testing.assert_array_equal(lib(x.astype(np.float64))[0], second[0])
    strided = np.asfortranarray(x)
    np.testing.assert_array_equal(lib(strided)[0], second[0])


def test_one_call_copies_outputs_that_are_inputs_or_constants():
    c = numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("Identity", ["c"], ["const"]),
         helper.make_node("Neg", ["x"], ["neg"])], "passthrough",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("same", "const", "neg")],
        initializer=[c])
    lib = _build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    x = np.array([1, 2, 3], np.float32)
    same, const, neg = lib(x)
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(const, [0, 1, 2])
    np.testing.assert_array_equal(neg, -x)
    assert not np.shares_memory(same, x)
    const[...] = 7  # must not change the library's constant
    np.testing.assert_array_equal(lib(x)[1], [0, 1, 2])


def test_one_call_names_missing_and_repeated_inputs():
    lib = _build(_model())
    (x,) = _inputs(count=1)
    gm = tessera.GraphModule(lib)
    with pytest.raises(RuntimeExecutionError, match="inputs not given: x"):
        gm()
    with pytest.raises(RuntimeExecutionError, match="input 'x' is given twice"):
        gm(x, x=x)
    with pytest.raises(RuntimeExecutionError, match="got shape"):
        gm(x[:1])


WORKSPACE_THREADS_MAIN = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include "tessera/c_backend_api.h"
#include "tessera/c_runtime_api.h"

static pthread_barrier_t barrier;
static _Alignas(16) uint8_t pools[2][256];

static void* run(void* arg) {
  uint8_t* pool = pools[(intptr_t)arg];
  TSWorkspaceInit(pool, sizeof pools[0]);
  pthread_barrier_wait(&barrier);  /* both runs have started */
  uint8_t* a = TSBackendAllocWorkspace(64);
  pthread_barrier_wait(&barrier);
  uint8_t* b = TSBackendAllocWorkspace(64);
  int ok = a >= pool && b >= a + 64 && b + 64 <= pool + sizeof pools[0];
  ok = ok && TSBackendFreeWorkspace(b) == 0 && TSBackendFreeWorkspace(a) == 0;
  return (void*)(intptr_t)ok;
}

int main(void) {
  pthread_t threads[2];
  void* ok[2];
  pthread_barrier_init(&barrier, NULL, 2);
  for (intptr_t k = 0; k < 2; ++k) pthread_create(&threads[k], NULL, run, (void*)k);
  for (int k = 0; k < 2; ++k) pthread_join(threads[k], &ok[k]);
  printf("%d %d\n", (int)(intptr_t)ok[0], (int)(intptr_t)ok[1]);
  return 0;
}
"""


def test_micro_workspace_allocator_is_per_thread_on_hosted_platforms(tmp_path):
    """AOT entry points with their own pools may run on several threads: each has its own allocator."""
    main = tmp_path / "main.c"
    main.write_text(WORKSPACE_THREADS_MAIN)
    exe = tmp_path / "workspaces"
    proc = subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Werror", "-pthread", f"-I{INCLUDE_DIR}",
                           str(main), str(source("workspace_stack.c")), "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split() == ["1", "1"]
