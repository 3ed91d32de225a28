"""The `blas` target: OpenBLAS behind RelayToTIR + TIRToRuntime hooks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera.backend.build_module import lower_to_tir
from tessera.backend.lift_workspace import workspace_params
from tessera import relay
from tessera.backend.report import partition_report
from tessera.frontend import from_onnx
from tessera.op import elemwise as ew
from tessera.op.nn import conv, matmul
from tessera.op.nn.gemm import KERNELS_BY_LANES
from tessera.op.annotation import on_target
from tessera.target import Target, simd
from tessera.transform.pass_infra import PassContext
from tessera.tir import stmt as S
from tessera.tir.printer import primfunc_str
from tessera.tir.functor import walk_expr
from tessera.tir import expr as E
from tessera.testing.models import LIGHT_MODELS, data_input, light_path, ort_run, seeded_input
from tessera.testing.weights import randomize_weights
from tessera.contrib import blas
from tessera.transform.declines import declined
from tessera.transform.partition import partition_for

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


def test_conv_becomes_an_sgemm_call_with_visible_scratch(blas_takes_small_gemms):
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


def _one_conv(data, weight, pad=0, tail=lambda y, x: ew.relu(y)):
    rng = np.random.default_rng(0)
    x = relay.Var("x", relay.TensorType(data, "float32"))
    w = relay.const((rng.standard_normal(weight) / np.sqrt(np.prod(weight[1:]))).astype(np.float32))
    b = relay.const(rng.standard_normal((weight[0], 1, 1)).astype(np.float32))
    y = conv.conv2d(x, w, strides=(1, 1), padding=(pad,) * 4, dilation=(1, 1))
    return relay.IRModule.from_expr(relay.Function((x,), tail(ew.add(y, b), x)))


def _blas_sources(lib) -> list[str]:
    return [s for s in lib.c_sources.values() if "cblas_sgemm" in s]


def _same_as_host_at_1_and_2_threads(lib, mod, data):
    x = np.random.default_rng(1).standard_normal(data).astype(np.float32)
    expected = tessera.build(mod, target="c")(x)[0]
    for threads in (1, 2):
        gm = tessera.GraphModule(lib, num_threads=threads)
        gm.set_input(0, x)
        gm.run()
        np.testing.assert_allclose(gm.get_output(0), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("data", "weight", "pad", "unfolded"), [
    ((1, 16, 8, 8), (16, 16, 1, 1), 0, False),  # 16 K multiply-adds
    ((1, 16, 8, 8), (16, 16, 3, 3), 1, True),  # 147 K, unfolded
])
def test_small_gemms_stay_on_the_host_saying_why(data, weight, pad, unfolded):
    """The host's C is as fast as OpenBLAS there (MIN_MACS, measured): the conv stays, with the reason."""
    lib = tessera.build(_one_conv(data, weight, pad), target="blas")
    assert not _blas_sources(lib) and "blas" not in partition_report(lib).op_counts()
    macs = weight[0] * data[2] * data[3] * int(np.prod(weight[1:]))
    assert macs < blas.MIN_MACS[unfolded]
    kind = "an unfolded (im2col) GEMM" if unfolded else "a GEMM"
    (note,) = [d for d in declined(lib.partitioned_mod) if d.op == "nn.conv2d" and d.kind.matched_a_pattern]
    assert note.reason == (f"pattern blas.conv2d: {kind} of {macs} multiply-adds, under "
                           f"{blas.MIN_MACS[unfolded]}: the host's own C is as fast")
    (kernel,) = partition_report(lib).kernels
    assert ("nn.conv2d", "blas", note.reason) in partition_report(lib).reasons(kernel)


def test_an_unfolded_conv_over_the_threshold_is_offloaded():
    """Only the partitioning (no C): a 3x3 conv of 2.4 G multiply-adds, over MIN_MACS, goes to blas."""
    mod = partition_for(_one_conv((1, 64, 256, 256), (64, 64, 3, 3), pad=1), Target("blas").accelerators[0])
    assert 64 * 256 * 256 * 64 * 9 >= blas.MIN_MACS[True]
    assert [f.attrs.compiler for _, f in mod.items() if f.attrs.compiler] == ["blas"]
    assert not [d for d in declined(mod) if d.op == "nn.conv2d"]


HOST_GEMM_REASON = ("the host has its packed GEMM ({} float32 lanes), measured faster than OpenBLAS on such products, "
                    "their tails fused")


@pytest.mark.parametrize(("host", "lanes"), [("c -mcpu=x86-64-v3", 8), ("c -mcpu=x86-64-v4", 16)])
def test_a_host_with_its_own_gemm_keeps_the_products_saying_why(host, lanes):
    """HOST_GEMM_FIRST: an AVX2 or AVX-512 host runs a 1x1 convolution (64 x 256 x 64, over MIN_MACS) and a
    dense layer faster than OpenBLAS; only the partitioning (no C), with each host named in the target."""
    for mod, op, entry in ((_one_conv((1, 64, 16, 16), (64, 64, 1, 1)), "nn.conv2d", "blas.conv2d"),
                           (_one_matmul((1, 128, 256), (256, 512)), "nn.matmul", "blas.matmul")):
        target = Target(f"{host} -accelerators=blas")
        partitioned = partition_for(mod, target.accelerators[0], host=target.host)
        assert not [f for _, f in partitioned.items() if f.attrs.compiler]
        (note,) = [d for d in declined(partitioned) if d.op == op and d.kind.matched_a_pattern]
        assert note.reason == f"pattern {entry}: {HOST_GEMM_REASON.format(lanes)}" and note.kind.matched_a_pattern


@pytest.mark.parametrize(("host", "lhs"), [
    ("c -mcpu=x86-64", (1, 128, 256)),  # SSE2 only: no packed GEMM on the host
    ("c -mcpu=x86-64-v3", (1, 4, 8192)),  # 4 rows: under the host GEMM's MIN_ROWS, it would run them plainly
])
def test_what_the_host_would_run_plainly_goes_to_openblas(host, lhs):
    mod = _one_matmul(lhs, (lhs[-1], 512))
    target = Target(f"{host} -accelerators=blas")
    partitioned = partition_for(mod, target.accelerators[0], host=target.host)
    assert [f.attrs.compiler for _, f in partitioned.items() if f.attrs.compiler] == ["blas"]


def test_a_call_pinned_to_blas_goes_there_beside_the_host_gemm():
    """A pin is the user's choice: the host's faster GEMM does not override it (on_target)."""
    x = relay.Var("x", relay.TensorType((128, 256), "float32"))
    w = relay.const(np.ones((256, 512), np.float32))
    pinned = relay.IRModule.from_expr(relay.Function((x,), on_target(matmul.matmul(x, w), "blas")))
    target = Target("c -mcpu=x86-64-v3 -accelerators=blas")
    partitioned = partition_for(pinned, target.accelerators[0], host=target.host)
    assert [f.attrs.compiler for _, f in partitioned.items() if f.attrs.compiler] == ["blas"]
    unpinned = relay.IRModule.from_expr(relay.Function((x,), matmul.matmul(x, w)))
    assert not [f for _, f in partition_for(unpinned, target.accelerators[0], host=target.host).items()
                if f.attrs.compiler]


def test_a_pinned_small_product_goes_to_openblas_and_is_right():
    """The size thresholds are speed rules like HOST_GEMM_FIRST: a pin overrides them (16 x 32 x 16, 8 K
    multiply-adds, far under MIN_MACS), and OpenBLAS's result is the product's."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    x = relay.Var("x", relay.TensorType((16, 32), "float32"))
    mod = relay.IRModule.from_expr(relay.Function((x,), on_target(matmul.matmul(x, relay.const(w)), "blas")))
    lib = tessera.build(mod, target="blas")
    assert _blas_sources(lib) and partition_report(lib).op_counts()["blas"] == {"nn.matmul": 1}
    a = rng.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(lib(a)[0], a @ w, rtol=1e-5, atol=1e-5)


def test_a_build_for_this_cpu_asks_the_native_host():
    """`target="blas"` (host `c`, this CPU): with AVX2 or AVX-512 the conv keeps the host's kernels, the report
    saying why; on an older x86-64 OpenBLAS takes it."""
    mod = _one_conv((1, 64, 16, 16), (64, 64, 1, 1))
    lib = tessera.build(mod, target="blas")
    lanes = simd.float32_lanes(Target("c"))
    if lanes not in KERNELS_BY_LANES:
        assert _blas_sources(lib)
        return
    assert not _blas_sources(lib) and "blas" not in partition_report(lib).op_counts()
    (note,) = [d for d in declined(lib.partitioned_mod) if d.op == "nn.conv2d" and d.kind.matched_a_pattern]
    assert note.reason == f"pattern blas.conv2d: {HOST_GEMM_REASON.format(lanes)}"


@pytest.mark.usefixtures("blas_beside_host_gemm")
def test_a_big_product_is_split_across_the_threads_by_columns():
    """1x1 conv, 64 x 256 x 64 (over MIN_MACS and PARALLEL_MIN_WORK): four 64-column parts, one sgemm each,
    in a parallel loop; OpenBLAS runs serially, so the threads share the product this way."""
    mod = _one_conv((1, 64, 16, 16), (64, 64, 1, 1))
    lib = tessera.build(mod, target="blas")
    (source,) = _blas_sources(lib)
    assert "TS_PARALLEL_FOR\n  for (int32_t part = 0; part < 4; ++part) {" in source
    assert "cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.0f, p1, 64, (p0 + (part * 64)), 256" \
        in source
    _same_as_host_at_1_and_2_threads(lib, mod, (1, 64, 16, 16))


def _one_matmul(lhs, rhs):
    x = relay.Var("x", relay.TensorType(lhs, "float32"))
    y = relay.Var("y", relay.TensorType(rhs, "float32"))
    return relay.IRModule.from_expr(relay.Function((x, y), matmul.matmul(x, y)))


def _parallel_loops(lib) -> list[S.For]:
    (kernel,) = [f for gv, f in lib.ir_mod.items() if gv.name_hint.startswith("tsgen_default_blas")]
    return [s for s in S.walk_stmts(kernel.body) if isinstance(s, S.For) and s.kind is S.ForKind.PARALLEL]


@pytest.mark.usefixtures("blas_beside_host_gemm")
@pytest.mark.parametrize(("lhs", "rhs", "loop", "parts"), [
    ((1, 128, 256), (256, 512), "part", 4),  # a dense layer: one product, split by columns
    ((1, 4, 64, 32), (1, 4, 32, 64), "b1", 4),  # attention scores: the threads share the heads
])
def test_matrix_products_run_on_all_threads(lhs, rhs, loop, parts):
    lib = tessera.build(_one_matmul(lhs, rhs), target="blas")
    (parallel,) = _parallel_loops(lib)
    assert (parallel.loop_var.name, parallel.extent.value) == (loop, parts)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(lhs).astype(np.float32), rng.standard_normal(rhs).astype(np.float32)
    one, two = (tessera.GraphModule(lib, num_threads=n, adaptive_threads=False)(a, b)[0] for n in (1, 2))
    np.testing.assert_allclose(two, np.matmul(a, b), rtol=1e-4, atol=1e-4)
    assert np.array_equal(one, two)  # each part is the same call on whichever thread


def test_a_one_row_product_stays_on_the_host_in_row_parts():
    """OpenBLAS's sgemv would run on one thread; the host's C runs the rows in parts on all of them."""
    lhs, rhs = (1, 2048), (2048, 1000)  # ResNet-50's classifier
    lib = tessera.build(_one_matmul(lhs, rhs), target="blas")
    assert not _blas_sources(lib) and "blas" not in partition_report(lib).op_counts()
    (note,) = [d for d in declined(lib.partitioned_mod) if d.op == "nn.matmul" and d.kind.matched_a_pattern]
    assert note.reason == ("pattern blas.matmul: a one-row product of 2048 x 1000: the host's C runs it on all "
                           "threads, sgemv on one")
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(lhs).astype(np.float32), rng.standard_normal(rhs).astype(np.float32)
    np.testing.assert_allclose(tessera.GraphModule(lib, num_threads=2)(a, b)[0], a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("blas_beside_host_gemm")
@pytest.mark.parametrize(("tail", "ops"), [
    (lambda y, x: ew.minimum(ew.maximum(y, relay.const(np.float32(0))), relay.const(np.float32(6))),
     {"nn.conv2d": 1, "add": 1, "maximum": 1, "minimum": 1}),  # ReLU6: a minimum of a maximum
    (lambda y, x: ew.relu(ew.add(y, x)), {"nn.conv2d": 1, "add": 2, "nn.relu": 1}),  # a residual add, then ReLU
    (lambda y, x: ew.silu(y), {"nn.conv2d": 1, "add": 1, "nn.silu": 1}),
])
def test_a_residual_add_and_a_clip_update_the_product_in_place(tail, ops):
    """After the bias, a residual add and ReLU, a ReLU6 or a SiLU join the partition, as the host would fuse them."""
    mod = _one_conv((1, 64, 16, 16), (64, 64, 1, 1), tail=tail)
    lib = tessera.build(mod, target="blas")
    assert partition_report(lib).op_counts()["blas"] == ops
    _same_as_host_at_1_and_2_threads(lib, mod, (1, 64, 16, 16))


def test_unfolded_blocks_run_on_all_threads_each_with_its_own_scratch(blas_takes_small_gemms):
    """Three blocks of 16 output rows: the threads share them, each unfolding its block into scratch it
    allocates (not a planned buffer: one per thread)."""
    mod = _one_conv((1, 32, 48, 48), (32, 32, 3, 3), pad=1)
    lib = tessera.build(mod, target="blas")
    (kernel,) = [f for gv, f in lib.ir_mod.items() if gv.name_hint.startswith("tsgen_default_blas")]
    assert not workspace_params(kernel)
    loop, tail = [s for s in S.walk_stmts(kernel.body) if isinstance(s, S.For) and s.kind is S.ForKind.PARALLEL]
    assert loop.loop_var.name == "blk" and loop.extent.value == 3
    assert tail.extent.value == 32  # the bias and ReLU after the call: 73 K elements, split by channel
    assert [s.buffer.name for s in S.walk_stmts(loop.body) if isinstance(s, S.Allocate)] == ["im2col_buf"]
    _same_as_host_at_1_and_2_threads(lib, mod, (1, 32, 48, 48))


def test_one_block_is_shared_by_rows_of_the_weights(blas_takes_small_gemms):
    """A small image is one block, unfolded once (planned scratch); the threads share its product by rows
    of the weights, 4 parts of 64 output channels."""
    mod = _one_conv((1, 256, 7, 7), (256, 256, 3, 3), pad=1)
    lib = tessera.build(mod, target="blas")
    (kernel,) = [f for gv, f in lib.ir_mod.items() if gv.name_hint.startswith("tsgen_default_blas")]
    assert [b.size for b in workspace_params(kernel)] == [256 * 9 * 49]
    loop, *tail = [s for s in S.walk_stmts(kernel.body) if isinstance(s, S.For) and s.kind is S.ForKind.PARALLEL]
    assert loop.loop_var.name == "part" and loop.extent.value == 4
    assert not tail  # the bias and ReLU after the call, 12 K elements: too little for a second thread
    (source,) = _blas_sources(lib)
    assert "cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 49, 2304" in source
    _same_as_host_at_1_and_2_threads(lib, mod, (1, 256, 7, 7))


def test_report_shows_what_went_where(tmp_path, blas_takes_small_gemms):
    mod, params = from_onnx(str(ROOT / "examples" / "digits" / "digits_cnn.onnx"))
    report = partition_report(tessera.build(mod, target="blas", params=params))
    counts = report.op_counts()
    assert counts["blas"]["nn.conv2d"] == 2 and counts["blas"]["nn.matmul"] == 1
    assert counts["host"]["nn.max_pool2d"] == 2
    assert "blas: 8 of 12 operators in 3 partitions" in report.text()
    assert [k.inputs for k in report.kernels] == [[], [0], [1], [2], [3], [4], [5]]
    page = report.html()
    assert page.startswith("<!doctype html>") and "<svg" in page and "nn.conv2d" in page


@pytest.mark.usefixtures("blas_beside_host_gemm")
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_match_onnxruntime_with_blas(name, record_property):
    record_property("suite", "light models, random weights, target blas")
    model = randomize_weights(onnx.load(light_path(name)), seed=0)
    input_name, shape = data_input(model)
    x = seeded_input(shape, seed=1)
    (expected,) = ort_run(model, {input_name: x})[:1]
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="blas", params=params)
    # OpenBLAS takes operators (beside the host's GEMM, which would keep them: the offload is under test), or
    # declines each it matched with its reason (AlexNet's, VGG-19's and ZFNet's convolutions are unfolded ones
    # under MIN_MACS, their classifiers one-row products the host runs in row parts)
    declines = [d for d in declined(lib.partitioned_mod) if d.kind.matched_a_pattern]
    assert "blas" in partition_report(lib).op_counts() or (declines and all(d.reason for d in declines))
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
def test_openblas_runs_on_the_calling_thread_unless_the_user_says(tmp_path, user, threads, blas_takes_small_gemms):
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


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_blas_lowers_the_light_models_to_the_hosts_own_kernels(name):
    """HOST_GEMM_FIRST: with AVX2 and with AVX-512 the host's packed GEMM keeps every product of the nine light
    models, so `blas` lowers each to the very kernels `c` does (lowered, not compiled; the stored placeholder
    weights, as only shapes decide). Its speed is then c's on any CPU of that level, AMD's or Intel's: the
    choice reads the vector width and the shapes, not the vendor (issue 16 asks for `blas` no slower than `c`
    on both)."""
    mod, params = from_onnx(onnx.load(light_path(name)))
    for level in ("x86-64-v3", "x86-64-v4"):
        kernels = {}
        for kind in ("c", "blas"):
            lowered = lower_to_tir(mod, Target(f"{kind} -mcpu={level}"), params, PassContext(), lambda m: None,
                                   "default")
            kernels[kind] = sorted(primfunc_str(f) for _, f in lowered.mod.items() if isinstance(f, S.PrimFunc))
        assert kernels["c"] and not any("cblas_" in k for k in kernels["blas"]), level
        assert kernels["blas"] == kernels["c"], level
