"""The `blas` target: OpenBLAS behind RelayToTIR + TIRToRuntime hooks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera.backend.lift_workspace import workspace_params
from tessera import relay
from tessera.backend.report import partition_report
from tessera.frontend import from_onnx
from tessera.op import elemwise as ew
from tessera.op.nn import conv
from tessera.target import Target
from tessera.tir import stmt as S
from tessera.tir.functor import walk_expr
from tessera.tir import expr as E
from tessera.testing.models import LIGHT_MODELS, data_input, light_path, ort_run, seeded_input
from tessera.testing.weights import randomize_weights

ROOT = Path(__file__).resolve().parents[2]


def test_alias_expands_to_the_composite():
    t = Target("blas")
    assert t.host == Target("c") and [a.kind.name for a in t.accelerators] == ["blas"]


def _conv_model():
    rng = np.random.default_rng(0)
    x = relay.Var("x", relay.TensorType((2, 3, 9, 9), "float32"))
    w = relay.const(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    b = relay.const(rng.standard_normal((8, 1, 1)).astype(np.float32))
    y = ew.relu(ew.add(conv.conv2d(x, w, strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1)), b))
    return relay.IRModule.from_expr(relay.Function((x,), y))


def test_conv_becomes_an_sgemm_call_with_visible_scratch():
    lib = tessera.build(_conv_model(), target="blas")
    (kernel,) = [f for gv, f in lib.ir_mod.items() if gv.name_hint.startswith("tsgen_default_blas")]
    stmts = list(S.walk_stmts(kernel.body))
    calls = [e for s in stmts if isinstance(s, S.Evaluate) for e in walk_expr(s.value)
             if isinstance(e, E.Call) and e.func == "cblas_sgemm"]
    # the scratch became parameters, planned memory the executor passes: the strided conv's padded
    # input window, C x ((OH-1)*S+KH) x ((OW-1)*S+KW), and the im2col block (C*KH*KW) x (OH*OW) taken from it
    scratch = workspace_params(kernel)
    assert len(calls) == 1 and [b.size for b in scratch] == [3 * 11 * 11, 27 * 25]
    assert not [s for s in stmts if isinstance(s, S.Allocate)]
    (node,) = [n for n in lib.graph_plan.nodes if n.op == "kernel" and "blas" in n.name]
    assert sorted(size for _, size in node.scratch) == [3 * 11 * 11 * 4, 27 * 25 * 4]
    # im2col copies padding without tests: its loops are split where the bounds tests change
    assert not [s for s in stmts if isinstance(s, S.BufferStore) and s.buffer.root.name != "out"
                and any(isinstance(e, E.Select) for e in walk_expr(s.value))]
    source = next(s for s in lib.c_sources.values() if "cblas_sgemm" in s)
    assert "#include <cblas.h>" in source
    assert "cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 8, 25, 27" in source
    x = np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(lib(x)[0], tessera.build(_conv_model(), target="c")(x)[0], rtol=1e-4, atol=1e-5)


def test_report_shows_what_went_where(tmp_path):
    mod, params = from_onnx(str(ROOT / "examples" / "digits" / "digits_cnn.onnx"))
    report = partition_report(tessera.build(mod, target="blas", params=params))
    counts = report.op_counts()
    assert counts["blas"]["nn.conv2d"] == 2 and counts["blas"]["nn.matmul"] == 1
    assert counts["host"]["nn.max_pool2d"] == 2
    assert "blas: 8 of 12 operators in 3 partitions" in report.text()
    assert [k.inputs for k in report.kernels] == [[], [0], [1], [2], [3], [4], [5]]
    page = report.html()
    assert page.startswith("<!doctype html>") and "<svg" in page and "nn.conv2d" in page


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_match_onnxruntime_with_blas(name, record_property):
    record_property("suite", "light models, random weights, target blas")
    model = randomize_weights(onnx.load(light_path(name)), seed=0)
    input_name, shape = data_input(model)
    x = seeded_input(shape, seed=1)
    (expected,) = ort_run(model, {input_name: x})[:1]
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="blas", params=params)
    assert "blas" in partition_report(lib).op_counts()
    np.testing.assert_allclose(lib(x)[0], expected, rtol=1e-3, atol=1e-4)


def test_openblas_gets_the_kernels_this_cpus_flags_allow(monkeypatch):
    """OpenBLAS 0.3.21 does not know newer CPU models and falls back to generic
    SSE3 kernels; the blas target names the family the CPU flags allow."""
    import os

    from tessera.contrib import blas
    from tessera.target import simd

    monkeypatch.setattr(simd, "native_cpu_flags", lambda: frozenset({"avx2", "fma", "avx512f", "avx512bw",
                                                                      "avx512vl", "avx512dq"}))
    assert blas.openblas_core_for_this_cpu() == "SkylakeX"
    monkeypatch.setattr(simd, "native_cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert blas.openblas_core_for_this_cpu() == "Haswell"
    monkeypatch.setattr(simd, "native_cpu_flags", lambda: frozenset({"sse2"}))
    assert blas.openblas_core_for_this_cpu() is None
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")  # the user's choice stands
    monkeypatch.setattr(simd, "native_cpu_flags", lambda: frozenset({"avx2", "fma"}))
    blas.blas_toolchain(Target("c"))
    assert os.environ["OPENBLAS_CORETYPE"] == "Zen"


@pytest.mark.parametrize(("user", "threads"), [(None, 1), ("2", 2)])
def test_openblas_runs_on_the_calling_thread_unless_the_user_says(tmp_path, user, threads):
    """tessera's OpenMP pool owns the cores: a loaded blas library sets OpenBLAS to one thread,
    unless OPENBLAS_NUM_THREADS is set. Checked in a fresh process, whose OpenBLAS starts with
    one thread per core (or the user's count)."""
    import os
    import subprocess
    import sys

    path = tessera.build(_conv_model(), target="blas").export_library(tmp_path / "conv.tar")
    code = ("import ctypes, tessera; tessera.load_module(%r); "
            "print(ctypes.CDLL('libopenblas.so.0').openblas_get_num_threads())" % str(path))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                             "OMP_NUM_THREADS")}
    env.update(PYTHONPATH=str(Path(tessera.__file__).resolve().parents[1]), OMP_NUM_THREADS="2")
    if user is not None:
        env["OPENBLAS_NUM_THREADS"] = user
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == threads
