"""Host schedules: planar convolutions, parallel loops and thread counts, graph segments."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.backend.build_module import build_graph, fuse, lower_fused
from tessera.errors import RuntimeExecutionError
from tessera.op import elemwise as ew
from tessera.op.nn import conv, matmul
from tessera.op.nn.conv import conv_reference, ConvAttrs
from tessera.op.nn.conv_schedule import ConvGeometry
from tessera.target import Target
from tessera.target.simd import missing_level_features, native_cpu_flags
from tessera.testing.isa import require_level
from tessera.transform import PassContext
from tessera.tune import Record, ScheduleContext, TuningLog, extract_tasks


def _build_forcing(mod, config: dict[str, int], target: str = "c"):
    """`mod` built for `target` with the only tunable workload's schedule forced to `config`, as the tuner does."""
    ctx, quiet = PassContext(), lambda msg: None
    (task,) = extract_tasks(mod, target)
    fused = fuse(mod, Target(target), None, ctx, quiet, "default")
    return build_graph(lower_fused(fused, Target(target), ctx, quiet, "default", forced={task.workload: config}),
                       quiet)


def _conv_module(shape, weight, strides, padding, dilation, groups, relu=False):
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    y = conv.conv2d(x, relay.const(weight), strides=strides, padding=padding, dilation=dilation, groups=groups)
    if relu:
        y = ew.relu(y)
    return relay.IRModule.from_expr(relay.Function((x,), y))


# (input NCHW, out channels, kernel, strides, padding (t, l, b, r), dilation, groups)
CASES = [
    ((1, 3, 11, 13), 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),       # odd sizes, channel tile 8
    ((1, 4, 9, 7), 6, (3, 2), (2, 3), (0, 2, 1, 0), (1, 1), 1),         # strides per dim, asymmetric pads
    ((1, 4, 10, 10), 4, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1),       # dilation
    ((2, 8, 8, 9), 16, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),        # batch 2, strided 1x1
    ((1, 6, 12, 5), 6, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 6),        # depthwise, strided
    ((1, 8, 7, 7), 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),        # grouped, 3 outputs per group
    ((1, 3, 20, 20), 5, (5, 5), (3, 3), (2, 2, 2, 2), (1, 1), 1),       # odd channel count, stride 3
]


@pytest.mark.parametrize("shape,oc,kernel,strides,padding,dilation,groups", CASES)
def test_planar_convolution_matches_the_reference(shape, oc, kernel, strides, padding, dilation, groups):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((oc, shape[1] // groups, *kernel)).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    mod = _conv_module(shape, w, strides, padding, dilation, groups, relu=True)
    (got,) = tessera.build(mod)(x)
    ref = np.maximum(conv_reference([x, w], ConvAttrs(strides, padding, dilation, groups)), 0)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("shape,oc,kernel,strides,padding,dilation,groups", CASES)
def test_planar_convolution_matches_the_reference_at_each_isa_level(level, shape, oc, kernel, strides, padding,
                                                                    dilation, groups):
    require_level(level)  # the tiles follow the level's register file (see conv_schedule._fits_registers)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((oc, shape[1] // groups, *kernel)).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    mod = _conv_module(shape, w, strides, padding, dilation, groups, relu=True)
    (got,) = tessera.build(mod, target=f"c -mcpu={level}")(x)
    ref = np.maximum(conv_reference([x, w], ConvAttrs(strides, padding, dilation, groups)), 0)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_every_tile_the_tuner_may_choose_computes_the_same_result():
    rng = np.random.default_rng(1)
    shape, w = (1, 8, 9, 9), rng.standard_normal((12, 8, 3, 3)).astype(np.float32)  # planar on AVX2 too
    x = rng.standard_normal(shape).astype(np.float32)
    mod = _conv_module(shape, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    expected = tessera.build(mod)(x)[0]
    (task,) = extract_tasks(mod, "c")
    choice = task.choice
    assert len(choice.candidates) >= 8
    sources = set()
    for config in choice.candidates:
        lib = _build_forcing(mod, config)
        sources.add("\n".join(lib.c_sources.values()))
        np.testing.assert_allclose(lib(x)[0], expected, rtol=1e-5, atol=1e-5, err_msg=str(config))
    # the forced configurations really built other kernels (a loop order over a single channel block
    # prints the same either way, so not every pair differs)
    assert len(sources) >= len(choice.candidates) - 2


def test_default_tiles_fit_the_image():
    sched = ScheduleContext(Target("c -march=armv8-a"))  # no known vector width: TILE_WIDTH positions
    big = ConvGeometry((1, 64, 56, 56), (3, 3), (1, 1), (1, 1), 64, 64).scheduled(sched)
    small = ConvGeometry((1, 256, 3, 3), (1, 1), (1, 1), (1, 1), 256, 256).scheduled(sched)
    depthwise = ConvGeometry((1, 32, 24, 24), (3, 3), (1, 1), (1, 1), 1, 1).scheduled(sched)
    assert big.tile[:2] == (8, 32) and small.tile[:2] == (8, 16) and depthwise.tile[:2] == (1, 32)
    # the larger of input and weights is streamed once: positions outside for early layers
    assert big.positions_outer and not small.positions_outer


def test_a_geometry_without_a_schedule_has_no_tile():
    g = ConvGeometry((1, 64, 56, 56), (3, 3), (1, 1), (1, 1), 64, 64)
    assert g.tile is None
    with pytest.raises(ValueError, match=r"not chosen yet: use ConvGeometry.scheduled\(sched\)"):
        g.tile_width
    fixed = ConvGeometry((1, 64, 56, 56), (3, 3), (1, 1), (1, 1), 64, 64, tile=(1, 1, 0))
    assert fixed.scheduled(ScheduleContext(Target("c"))) is fixed  # a given tile is kept


def _lib_and_input():
    rng = np.random.default_rng(2)
    shape = (1, 16, 32, 32)
    # 12 output channels: fewer than AVX2's GEMM over planes takes (conv_planes_gemm), so the planar stages run
    w = rng.standard_normal((12, 16, 3, 3)).astype(np.float32)
    return tessera.build(_conv_module(shape, w, (1, 1), (1, 1, 1, 1), (1, 1), 1, relu=True)), \
        rng.standard_normal(shape).astype(np.float32)


def test_large_stages_run_as_parallel_loops_and_small_ones_do_not():
    lib, _ = _lib_and_input()
    source = "\n".join(lib.c_sources.values())
    assert "TS_PARALLEL_FOR" in source and "_Pragma(\"omp parallel for" in source
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    tiny = tessera.build(relay.IRModule.from_expr(relay.Function((x,), ew.relu(x))))
    assert "TS_PARALLEL_FOR" not in "\n".join(tiny.c_sources.values())


def test_thread_counts_give_identical_outputs():
    lib, x = _lib_and_input()
    outputs = []
    for threads in (1, 2, 3):
        module = tessera.GraphModule(lib, num_threads=threads)
        module.set_input(0, x)
        module.run()
        outputs.append(module.get_output(0))
    np.testing.assert_array_equal(outputs[0], outputs[1])
    np.testing.assert_array_equal(outputs[0], outputs[2])


def test_thread_count_errors_name_the_setting(monkeypatch):
    lib, _ = _lib_and_input()
    with pytest.raises(RuntimeExecutionError, match="at least 1"):
        tessera.GraphModule(lib, num_threads=0)
    monkeypatch.setenv("TESSERA_NUM_THREADS", "two")
    with pytest.raises(RuntimeExecutionError, match="TESSERA_NUM_THREADS='two'"):
        tessera.GraphModule(lib)
    monkeypatch.setenv("TESSERA_NUM_THREADS", "2")
    tessera.GraphModule(lib).run()


def test_c_kernel_calls_run_as_one_segment():
    lib, x = _lib_and_input()
    graph = json.loads(lib.graph_json)
    kernels = [n for n, node in enumerate(graph["nodes"]) if node["op"] == "kernel"]
    assert [seg["nodes"] for seg in graph["segments"]] == [kernels]
    source = lib.c_sources["graph_segments.c"]
    assert f"int32_t {graph['segments'][0]['func']}(void* const* args, int32_t* failed_call)" in source
    module = tessera.GraphModule(lib)
    module.set_input(0, x)
    module.run()
    per_call = module.profile(repeat=1)  # the kernels one by one (a failing one raises)
    assert [name for name, _ in per_call] == [graph["nodes"][n]["func"] for n in kernels]
    np.testing.assert_array_equal(module.get_output(0), lib(x)[0])


@pytest.mark.parametrize("target,lanes,width", [
    ("c -march=icelake-server", 16, 32),
    ("c -march=haswell", 8, 16),
    ("c -march=x86-64 -mattr=avx2", 8, 16),
    ("c -march=armv8-a", None, 32),  # vector width unknown: TILE_WIDTH
    ("c -mcpu=cortex-m4", None, 16),  # Cortex-M: the tile `tessera tune --board` found
])
def test_register_tiles_follow_the_targets_vector_width(target, lanes, width):
    from tessera.target.simd import float32_lanes

    assert float32_lanes(Target(target)) == lanes
    g = ConvGeometry((1, 64, 56, 56), (3, 3), (1, 1), (1, 1), 64, 64).scheduled(ScheduleContext(Target(target)))
    assert g.tile_width == width


@pytest.mark.skipif("avx2" not in native_cpu_flags(), reason="runs AVX2 code, which this CPU cannot execute")
def test_a_haswell_build_uses_two_avx2_vectors_per_tile_row_of_four_channels():
    rng = np.random.default_rng(3)
    shape, w = (1, 8, 16, 16), rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    lib = tessera.build(_conv_module(shape, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), target="c -march=haswell")
    # 4 channels x 16 positions: 8 accumulators, 2 input vectors and a broadcast fit AVX2's 16 registers
    assert "float conv2d_tile[64];" in "\n".join(lib.c_sources.values())
    ref = conv_reference([x, w], ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))
    np.testing.assert_allclose(lib(x)[0], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, channels", [
    ("c -mcpu=x86-64-v3", 4),  # 16 ymm registers: 8 x 2 accumulators would spill
    ("c -mcpu=x86-64-v4", 8),  # 32 zmm registers
    ("c -march=haswell", 4),
    ("c -march=armv8-a", 8),  # register file unknown: the first channel count that divides
])
def test_dense_tiles_leave_registers_for_the_inputs(target, channels):
    sched = ScheduleContext(Target(target))
    for out, kernel in (((1, 64, 56, 56), (3, 3)), ((1, 512, 7, 7), (3, 3)), ((1, 64, 112, 112), (7, 7))):
        g = ConvGeometry(out, kernel, (1, 1), (1, 1), 64, out[1]).scheduled(sched)
        assert g.tile_channels() == channels, (target, out)
    # a group of two output channels keeps its one choice; depthwise tiles are not affected
    assert ConvGeometry((1, 8, 9, 9), (3, 3), (1, 1), (1, 1), 4, 2).scheduled(sched).tile_channels() == 2
    assert ConvGeometry((1, 8, 9, 9), (3, 3), (1, 1), (1, 1), 1, 1).scheduled(sched).tile_channels() == 1


def _matmul_module():
    rng = np.random.default_rng(4)
    a = relay.Var("a", relay.TensorType((24, 40), "float32"))
    b = rng.standard_normal((40, 64)).astype(np.float32)
    mod = relay.IRModule.from_expr(relay.Function((a,), matmul.matmul(a, relay.const(b))))
    return mod, rng.standard_normal((24, 40)).astype(np.float32), b


def test_every_matmul_tile_the_tuner_may_choose_computes_the_same_result():
    """The register-tiled schedule, kept for targets without AVX2 (baseline x86-64: SSE2)."""
    target = "c -mcpu=x86-64" if platform.machine() == "x86_64" else "c"
    mod, x, b = _matmul_module()
    expected = tessera.build(mod, target=target)(x)[0]
    (task,) = extract_tasks(mod, target)
    choice = task.choice
    assert task.workload.op == "matmul" and choice.default == {"rows": 6, "cols": 16}
    assert {"rows": 8, "cols": 32} in choice.candidates and len(choice.candidates) == 15  # 5 row x 3 column counts
    np.testing.assert_allclose(expected, x @ b, rtol=1e-4, atol=1e-4)
    for config in choice.candidates:
        np.testing.assert_allclose(_build_forcing(mod, config, target)(x)[0], expected, rtol=1e-5, atol=1e-5,
                                   err_msg=str(config))


@pytest.mark.parametrize("level, default", [("x86-64-v3", {"mr": 6, "nr": 16}), ("x86-64-v4", {"mr": 8, "nr": 32})])
def test_every_gemm_microkernel_the_tuner_may_choose_computes_the_same_result(level, default):
    """AVX2 and AVX-512 targets run float32 products as the packed-panel GEMM (op/nn/gemm.py)."""
    if platform.machine() != "x86_64" or missing_level_features(level):
        pytest.skip(f"this CPU cannot run {level} code")
    target = f"c -mcpu={level}"
    mod, x, b = _matmul_module()
    (task,) = extract_tasks(mod, target)
    assert task.workload.op == "gemm" and task.choice.default == default and default in task.choice.candidates
    for config in task.choice.candidates:
        np.testing.assert_allclose(_build_forcing(mod, config, target)(x)[0], x @ b, rtol=1e-4, atol=1e-4,
                                   err_msg=str(config))


def test_a_log_steers_only_builds_for_the_target_it_was_measured_for():
    shape = (1, 64, 56, 56)
    seen = []
    ConvGeometry(shape, (3, 3), (1, 1), (1, 1), 64, 64).scheduled(ScheduleContext(Target("c"), collector=seen.append))
    (choice,) = seen
    odd = {"channels": 4, "width": 16, "positions_outer": 0}
    assert odd in choice.candidates and odd != choice.default
    log = TuningLog([Record(choice.workload, odd, 1e-6, "c")])
    for target, expected in [("c", (4, 16, 0)), ("c -march=haswell", None), ("c -mcpu=cortex-m4", None)]:
        g = ConvGeometry(shape, (3, 3), (1, 1), (1, 1), 64, 64).scheduled(ScheduleContext(Target(target), log))
        assert (g.tile == expected) if expected else (g.tile != (4, 16, 0)), target
