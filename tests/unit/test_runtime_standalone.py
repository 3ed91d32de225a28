"""The runtime stands alone (issue 17, item 4): loading and running an exported
library imports no compiler module.

Each library is compiled and exported here, then loaded and run in a fresh
interpreter that reports which tessera packages it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx

SRC = Path(tessera.__file__).resolve().parents[1]
COMPILER = {"backend", "codegen", "contrib", "frontend", "micro", "op", "relay", "target", "te", "testing",
            "tir", "transform", "tune", "cli"}
RUNTIME_SIDE = {"crt", "dtype", "errors", "runtime", "util"}  # what loading and running may import

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tessera

    after_import = sorted({m.split(".")[1] for m in sys.modules if m.startswith("tessera.")})
    lib = tessera.load_module(sys.argv[1])
    x = np.load(sys.argv[2])
    y = lib(x)[0]
    np.save(sys.argv[3], y)
    y_module = tessera.GraphModule(lib)(x)[0]
    print(json.dumps({
        "after_import": after_import,
        "after_run": sorted({m.split(".")[1] for m in sys.modules if m.startswith("tessera.")}),
        "modules": sorted(m for m in sys.modules if m.startswith("tessera.")),
        "same_through_graph_module": bool(np.array_equal(y, y_module)),
    }))
""")


def _run_child(library: Path, x: np.ndarray, tmp_path: Path) -> tuple[dict, np.ndarray]:
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(library), str(tmp_path / "x.npy"),
                           str(tmp_path / "y.npy")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), np.load(tmp_path / "y.npy")


def _dense_relu(w: np.ndarray) -> onnx.ModelProto:
    n = w.shape[0]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_loading_and_running_a_library_imports_no_compiler_module(tmp_path):
    rng = np.random.default_rng(17)
    w = rng.standard_normal((24, 24)).astype(np.float32)
    x = rng.standard_normal((2, 24)).astype(np.float32)
    mod, params = from_onnx(_dense_relu(w))
    path = tessera.build(mod, params=params).export_library(tmp_path / "dense.so")

    report, y = _run_child(path, x, tmp_path)

    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    assert report["same_through_graph_module"]
    assert set(report["after_import"]) <= RUNTIME_SIDE, report["after_import"]
    compiler = sorted(set(report["after_run"]) & COMPILER)
    assert not compiler, f"loading and running imported compiler packages {compiler}: {report['modules']}"
    assert set(report["after_run"]) <= RUNTIME_SIDE, report["after_run"]


def test_the_compiler_is_still_one_attribute_away():
    """`import tessera` is lazy, not smaller: build, the subpackages and the built-in targets stay reachable."""
    code = textwrap.dedent("""
        import sys
        import tessera
        assert "tessera.backend" not in sys.modules
        from tessera import build
        assert build is tessera.build and "tessera.backend.build_module" in sys.modules
        assert callable(tessera.frontend.from_onnx)
        from tessera.target import Target
        print(Target("c"), "|", Target("blas"), "|", Target("onnxruntime"), "|", Target("c -mcpu=cortex-m4"))
        try:
            tessera.no_such_name
        except AttributeError as exc:
            print(exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    targets, missing = proc.stdout.splitlines()
    assert targets == "c | c -accelerators=blas | c -accelerators=onnxruntime | c -mcpu=cortex-m4"
    assert missing == "module 'tessera' has no attribute 'no_such_name'"


def test_first_target_look_ups_from_several_threads_all_find_the_built_in_kinds():
    """The built-in kinds load on the first registry read; threads racing to it must all see them."""
    code = textwrap.dedent("""
        import threading
        import tessera
        from tessera.target import Target
        start, results = threading.Barrier(6), []
        def look_up(spec):
            start.wait()
            try:
                results.append(str(Target(spec)))
            except Exception as exc:
                results.append(f"{type(exc).__name__}: {exc}")
        specs = ["c", "blas", "onnxruntime", "c -mcpu=cortex-m4", "blas", "c"]
        threads = [threading.Thread(target=look_up, args=(s,)) for s in specs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(*sorted(results), sep="\\n")
    """)
    for _ in range(3):  # a fresh interpreter each time: the race is only on the very first read
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == sorted(
            ["c", "c", "c -mcpu=cortex-m4", "c -accelerators=blas", "c -accelerators=blas",
             "c -accelerators=onnxruntime"])


def test_an_unknown_kind_after_a_plain_import_lists_the_built_in_kinds():
    code = "import tessera.target as t\ntry:\n    t.Target('cc')\nexcept t.TargetError as exc:\n    print(exc)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("unknown target kind 'cc' (did you mean 'c'?); known kinds: ")
    for kind in ("blas", "c", "composite", "onnxruntime"):
        assert kind in proc.stdout.split("known kinds: ")[1]


def test_an_external_module_is_rebuilt_in_a_fresh_process(tmp_path):
    """A library with an onnxruntime partition names the module that loads it, so a fresh process
    that never imported the onnxruntime target still runs it."""
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 3)).astype(np.float32)
    graph = helper.make_graph(  # Det: an operator tessera lacks
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Det", ["h"], ["d"]),
         helper.make_node("Relu", ["d"], ["y"])],
        "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mod, params = from_onnx(model, opaque_unsupported=True)
    lib = tessera.build(mod, target="onnxruntime", params=params)
    assert [m.type_key for m in lib.external_modules] == ["onnxruntime"]
    x = rng.standard_normal((2, 3, 3)).astype(np.float32)

    report, y = _run_child(lib.export_library(tmp_path / "det.so"), x, tmp_path)

    np.testing.assert_allclose(y, np.maximum(np.linalg.det(x @ w), 0), rtol=1e-4, atol=1e-5)
    assert "tessera.contrib.onnxruntime" in report["modules"]  # imported because the file names it
