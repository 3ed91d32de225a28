"""Host kernels' OpenMP threads: the spin count tessera sets before libgomp loads, and results
that do not depend on the thread count.

The policy tests run in fresh interpreters: libgomp reads its settings once, when it loads,
and this test process has loaded it long ago. OMP_DISPLAY_ENV=verbose makes libgomp print the
settings it read, which is what the tests check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.runtime.openmp_wait import SPIN_COUNT, WaitPolicy

SRC = str(Path(tessera.__file__).resolve().parents[1])
# prints what prepare_openmp decided, then whether it left the environment as it found it
REPORT = (
    "import json, os; from tessera.runtime.openmp_wait import prepare_openmp; s = prepare_openmp(); "
    "print(json.dumps([s.policy.value, s.detail, os.environ.get('GOMP_SPINCOUNT')]))"
)


def _run(code: str, **env: str) -> tuple[list, str]:
    """Run `code` in a fresh interpreter whose environment has no OpenMP settings but `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    clean.update(PYTHONPATH=SRC, OMP_DISPLAY_ENV="verbose", **env)
    done = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


def test_tessera_sets_a_short_spin_and_restores_the_environment():
    (policy, detail, env_after), shown = _run(REPORT)
    assert policy == WaitPolicy.TESSERA.value and "libgomp" in detail
    assert env_after is None  # child processes see the user's environment
    assert f"GOMP_SPINCOUNT = '{SPIN_COUNT}'" in shown


@pytest.mark.parametrize(("name", "value", "spin"), [("OMP_WAIT_POLICY", "active", "30000000000"),
                                                     ("GOMP_SPINCOUNT", "5000", "5000")])
def test_a_users_setting_stands(name, value, spin):
    code = REPORT + "; import ctypes; ctypes.CDLL('libgomp.so.1')"
    (policy, detail, _), shown = _run(code, **{name: value})
    assert (policy, detail) == (WaitPolicy.USER.value, f"{name}={value}")
    assert f"GOMP_SPINCOUNT = '{spin}'" in shown


def test_a_libgomp_loaded_first_keeps_its_policy():
    (policy, detail, env_after), shown = _run("import ctypes; ctypes.CDLL('libgomp.so.1'); " + REPORT)
    assert policy == WaitPolicy.ALREADY_LOADED.value and "libgomp" in detail
    assert env_after is None and "GOMP_SPINCOUNT = '300000'" in shown  # libgomp's own default


def _conv_model() -> onnx.ModelProto:
    """A convolution, a matrix product and a softmax, each large enough for a parallel loop."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((32 * 30 * 30, 64)).astype(np.float32) / 100, "m")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 0, 0, 0]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "m"], ["p"]), helper.make_node("Softmax", ["p"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "threads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], initializer=[w, m])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_loaded_library_runs_on_the_short_spin_pool(tmp_path):
    mod, params = from_onnx(_conv_model())
    path = tessera.build(mod, target="c", params=params).export_library(tmp_path / "model.tar")
    code = (f"import tessera; lib = tessera.load_module({str(path)!r}); tessera.GraphModule(lib, num_threads=2); "
            + REPORT)
    (policy, _, _), shown = _run(code)
    assert policy == WaitPolicy.TESSERA.value and f"GOMP_SPINCOUNT = '{SPIN_COUNT}'" in shown


@pytest.mark.parametrize("target", ["c", "blas"])
def test_one_and_two_threads_give_the_same_bits(target):
    mod, params = from_onnx(_conv_model())
    lib = tessera.build(mod, target=target, params=params)
    pragmas = [line for c in lib.c_sources.values() for line in c.splitlines()
               if line.strip() in ("TS_PARALLEL_FOR", "TS_PARALLEL_FOR_2")]
    assert pragmas or target == "blas"  # tessera's own kernels do have parallel loops (blas: OpenBLAS's)
    x = np.random.default_rng(1).standard_normal((2, 16, 32, 32)).astype(np.float32)
    one, two = (tessera.GraphModule(lib, num_threads=n)(x)[0] for n in (1, 2))
    # static partitioning: every element is computed by the same code whichever thread runs it
    assert np.array_equal(one, two)


# runs the model at argv[2] threads until a run starts and ends on the same CPU, then prints that CPU, the
# caller's affinity and that of each thread the runs created (the OpenMP pool's)
PLACEMENT = """
import ctypes, json, os, sys
import numpy as np, tessera
gm = tessera.GraphModule(tessera.load_module(sys.argv[1]), num_threads=int(sys.argv[2]), adaptive_threads=False)
x, libc = np.zeros((2, 16, 32, 32), np.float32), ctypes.CDLL(None)
before = set(os.listdir("/proc/self/task"))
for _ in range(50):
    cpu = libc.sched_getcpu()
    gm(x)
    if libc.sched_getcpu() == cpu:
        break
pool = sorted(set(os.listdir("/proc/self/task")) - before)
print(json.dumps([cpu, sorted(os.sched_getaffinity(0)), [sorted(os.sched_getaffinity(int(t))) for t in pool]]))
"""


@pytest.fixture(scope="module")
def exported_conv_model(tmp_path_factory) -> Path:
    mod, params = from_onnx(_conv_model())
    return tessera.build(mod, target="c", params=params).export_library(tmp_path_factory.mktemp("placed") / "m.tar")


def _placement(path: Path, threads: int = 2, **env: str) -> tuple[int, list[int], list[list[int]]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    clean.update(PYTHONPATH=SRC, **env)
    done = subprocess.run([sys.executable, "-c", PLACEMENT, str(path), str(threads)], env=clean, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cpu, caller, pool = json.loads(done.stdout.strip().splitlines()[-1])
    return cpu, caller, pool


@pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2,
                    reason="thread placement is Linux-only and needs two CPUs")
def test_the_pools_other_thread_is_bound_off_the_callers_cpu(exported_conv_model):
    cpu, caller, pool = _placement(exported_conv_model)
    assert caller == sorted(os.sched_getaffinity(0))  # the caller itself is never bound
    assert len(pool) == 1  # two threads: the caller and one of the pool's
    (bound,) = pool
    assert len(bound) == 1 and bound[0] != cpu and bound[0] in caller


@pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2,
                    reason="thread placement is Linux-only and needs two CPUs")
def test_more_threads_than_cpus_take_the_callers_cpu_last(exported_conv_model):
    cpus = sorted(os.sched_getaffinity(0))
    cpu, caller, pool = _placement(exported_conv_model, threads=len(cpus) + 1)
    assert caller == cpus and all(len(bound) == 1 for bound in pool)
    after = [c for c in cpus if c > cpu] + [c for c in cpus if c < cpu] + [cpu]  # the order of the binding
    assert sorted(bound[0] for bound in pool) == sorted(after)  # one thread per CPU, the caller's own included


@pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2,
                    reason="thread placement is Linux-only and needs two CPUs")
def test_a_user_who_sets_omp_proc_bind_places_the_threads(exported_conv_model):
    _, caller, pool = _placement(exported_conv_model, OMP_PROC_BIND="false")
    assert pool == [caller]  # left where libgomp put it: anywhere the caller may run
