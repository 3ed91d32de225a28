"""The tuner's knobs beyond register tiles (a dilated convolution's region plan, the GEMM microkernel for
the target's ISA), its time budget, and logs kept per CPU: timings from another CPU are not followed, and a
corrupt log is a clear error. No timings are asserted: only what is measured, recorded and built."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.errors import TesseraError
from tessera.op.elemwise_activation import relu
from tessera.op.nn import conv, matmul
from tessera.target import Target
from tessera.target.cpu_id import cpu_key, cpu_model, describe_cpu, isa_level
from tessera.target.simd import X86_64_LEVELS, float32_lanes
from tessera.transform import PassContext
from tessera.tune import (
    LOG_CONFIG_KEY, OtherCpuWarning, Record, ScheduleContext, TuningLog, Workload, extract_tasks, tune,
)

C = Target("c")
WORKLOAD = Workload.of("toy", {"n": 3})
CANDIDATES = [{"a": 1}, {"a": 2}, {"a": 4}]
DEFAULT = {"a": 2}


def _choose(sched: ScheduleContext) -> dict[str, int]:
    return sched.choose("toy", {"n": 3}, CANDIDATES, DEFAULT)


CONV_WEIGHT = np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype(np.float32)
MATMUL_B = np.random.default_rng(1).standard_normal((40, 48)).astype(np.float32)


def dilated_conv(dilation: int = 6, size: tuple[int, int] = (9, 11)) -> relay.IRModule:
    """A 3x3 convolution and ReLU whose dilation leaves most taps reading padding (as in an ASPP head).
    (Where the outer taps reach the image for few outputs, as dilation 12 on 9 x 11, the graph passes
    TrimConvTaps and SplitDilatedConv take the convolution before its region plans.)"""
    x = relay.Var("x", relay.TensorType((1, 8, *size), "float32"))
    y = conv.conv2d(x, relay.const(CONV_WEIGHT), strides=(1, 1), padding=(dilation,) * 4,
                    dilation=(dilation, dilation))
    return relay.IRModule.from_expr(relay.Function((x,), relu(y)))


def small_matmul() -> relay.IRModule:
    a = relay.Var("a", relay.TensorType((24, 40), "float32"))
    return relay.IRModule.from_expr(relay.Function((a,), matmul.matmul(a, relay.const(MATMUL_B))))


def dilated_conv_reference(x: np.ndarray, dilation: int) -> np.ndarray:
    """ReLU of the 3x3 convolution with CONV_WEIGHT, padding = dilation (so the output is as large as `x`)."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (dilation, dilation), (dilation, dilation)])
    out = np.zeros((x.shape[0], CONV_WEIGHT.shape[0], *x.shape[2:]), np.float64)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i * dilation:i * dilation + x.shape[2], j * dilation:j * dilation + x.shape[3]]
            out += np.einsum("nchw,oc->nohw", patch, CONV_WEIGHT[:, :, i, j])
    return np.maximum(out, 0)


# ------------------------------------------------------------------ which CPU (no C compiler)


def test_isa_level_is_the_highest_whose_flags_are_all_there():
    assert isa_level(X86_64_LEVELS["x86-64-v3"] | {"aes"}) == "x86-64-v3"
    assert isa_level(X86_64_LEVELS["x86-64-v4"]) == "x86-64-v4"
    assert isa_level(X86_64_LEVELS["x86-64-v4"] - {"avx512vl"}) == "x86-64-v3"  # a VM hiding part of AVX-512
    assert isa_level(frozenset({"fp", "asimd"})) == ""


def test_cpu_model_reads_the_model_name_of_cpuinfo():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 17\nmodel name\t: AMD EPYC  9R14 96-Core Processor\n"
    assert cpu_model(x86) == "AMD EPYC 9R14 96-Core Processor"
    assert cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n") \
        == "Raspberry Pi 4 Model B Rev 1.4"
    assert cpu_model("processor\t: 0\n") == ""
    assert describe_cpu("AMD EPYC 9R14", "x86-64-v4") == "AMD EPYC 9R14 (x86-64-v4)"
    assert describe_cpu("", "") == "unknown CPU (unknown ISA level)"
    assert cpu_key() == cpu_key() and cpu_key().endswith(")")


# ------------------------------------------------------------------ logs per CPU (no C compiler)


def _log_on(*cpus: str) -> TuningLog:
    """A record per CPU, each CPU's config the fastest of its own (a=1 on the first, a=4 on the second)."""
    configs = [{"a": 1}, {"a": 4}]
    return TuningLog([Record(WORKLOAD, configs[k], 1e-3 * (k + 1), "c", cpu=cpu) for k, cpu in enumerate(cpus)])


def test_a_build_follows_only_the_timings_of_its_own_cpu():
    log = _log_on("CPU A (x86-64-v4)", "CPU B (x86-64-v3)")
    assert _choose(ScheduleContext(C, log, cpu="CPU A (x86-64-v4)")) == {"a": 1}
    assert _choose(ScheduleContext(C, log, cpu="CPU B (x86-64-v3)")) == {"a": 4}  # slower elsewhere, best here
    assert _choose(ScheduleContext(C, log, cpu="CPU C (x86-64-v4)")) == DEFAULT  # nobody timed this CPU
    log.add(Record(WORKLOAD, {"a": 4}, 1.0, "c"))  # a record of an older log, without a CPU: applies anywhere
    assert _choose(ScheduleContext(C, log, cpu="CPU C (x86-64-v4)")) == {"a": 4}


def test_the_same_model_name_at_another_isa_level_is_another_cpu():
    log = _log_on("AMD EPYC (x86-64-v4)")
    assert _choose(ScheduleContext(C, log, cpu="AMD EPYC (x86-64-v3)")) == DEFAULT


def test_board_counts_apply_whatever_the_host_cpu():
    log = TuningLog([Record(WORKLOAD, {"a": 4}, 0.0, "c", board="mps2-an386", instructions=10)])
    assert _choose(ScheduleContext(C, log, cpu="any CPU (x86-64-v2)")) == {"a": 4}
    assert log.other_cpus("any CPU (x86-64-v2)") == {}


def test_a_build_on_another_cpu_warns_once_that_the_log_is_not_used(tmp_path):
    elsewhere = "Some Other CPU (x86-64-v2)"
    assert elsewhere != cpu_key()
    log = _log_on(elsewhere)
    with pytest.warns(OtherCpuWarning, match=r"1 of its 1 measurements were made on another CPU "
                                             r"\(1 on Some Other CPU \(x86-64-v2\)\) and are not used on this one"):
        sched = ScheduleContext.for_build(C, {LOG_CONFIG_KEY: log})
    assert _choose(sched) == DEFAULT
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ScheduleContext.for_build(C, {LOG_CONFIG_KEY: log})  # the same log: said once
        ScheduleContext.for_build(C, {LOG_CONFIG_KEY: _log_on(cpu_key())})  # this CPU's own log: nothing to say


def test_the_log_file_keeps_each_records_cpu(tmp_path):
    log = _log_on("CPU A (x86-64-v4)")
    log.add(Record(WORKLOAD, {"a": 2}, 0.0, "c -mcpu=cortex-m4", board="mps2-an386", instructions=7))
    path = tmp_path / "log.json"
    log.save(path)
    rows = json.loads(path.read_text())
    assert sorted(r.get("cpu", "") for r in rows) == ["", "CPU A (x86-64-v4)"]  # board counts carry none
    assert sorted(TuningLog.load(path).records, key=str) == sorted(log.records, key=str)


@pytest.mark.parametrize("text, message", [
    ('[{"op": "conv2d", "key": "{}", "config": {"c": 1}, "seconds": 1', r"is malformed \(not JSON: "),  # cut short
    ("", r"is malformed \(not JSON: "),
    ('{"op": "conv2d"}', r"is malformed \(got a JSON dict, expected a list of records\)"),
    ('["conv2d"]', r"is malformed \(record 1, "),
    ('[{"op": "a", "key": "{}", "config": {"c": 1}, "seconds": 1}, {"op": "a", "key": "{}", "config": 3, '
     '"seconds": 1}]', r"is malformed \(record 2, 'config' is a int, expected an object of knob values\)"),
    ('[{"op": "a", "key": "{}", "config": {}, "seconds": "fast"}]', r"is malformed \(record 1, could not convert"),
    ('[{"op": "a", "key": "{}", "config": {}}]', r"is malformed \(record 1, missing 'seconds'\)"),
])
def test_a_corrupt_log_is_an_error_that_says_what_and_where(tmp_path, text, message):
    path = tmp_path / "log.json"
    path.write_text(text)
    with pytest.raises(TesseraError, match=message + r".*delete it, or make it again with `tessera tune"):
        TuningLog.load(path)


def test_tuning_into_a_corrupt_log_fails_and_keeps_the_file(tmp_path):
    path = tmp_path / "log.json"
    path.write_text("[{")
    with pytest.raises(TesseraError, match="is malformed"):
        tune(small_matmul(), "c", log=path, trials=1, repeat=1)
    assert path.read_text() == "[{"


# ------------------------------------------------------------------ knobs the kernels declare (no C compiler)


@pytest.mark.parametrize("dilation, size, splits", [(6, (9, 11), False), (12, (20, 22), True)])
def test_a_dilated_convolution_offers_its_region_plans_with_the_cost_models_default(dilation, size, splits):
    tasks = {t.workload.op: t for t in extract_tasks(dilated_conv(dilation, size), "c")}
    regions = tasks["conv2d_regions"]
    plans = [c["plan"] for c in regions.choice.candidates]
    assert 0 in plans and len(plans) >= 3  # the one-plane schedule and at least two splits
    assert regions.choice.default in regions.choice.candidates
    # the estimate keeps one plane for 8 channels at dilation 6 (the tuner may still find a split faster),
    # and splits at dilation 12, where most taps of a 20 x 22 image read padding
    assert (regions.choice.default != {"plan": 0}) == splits
    assert regions.choice.work == 16 * size[0] * size[1] * 8 * 9  # multiply-adds of the whole convolution


def test_undilated_convolutions_have_no_region_knob():
    x = relay.Var("x", relay.TensorType((1, 8, 12, 12), "float32"))
    w = relay.const(np.ones((8, 8, 3, 3), np.float32))
    mod = relay.IRModule.from_expr(relay.Function((x,), conv.conv2d(x, w, strides=(1, 1), padding=(1,) * 4,
                                                                      dilation=(1, 1))))
    assert [t.workload.op for t in extract_tasks(mod, "c")] == ["conv2d"]


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_gemm_microkernels_offered_fit_the_targets_vector_registers(level):
    (task,) = extract_tasks(small_matmul(), f"c -mcpu={level}")
    lanes = float32_lanes(Target(f"c -mcpu={level}"))
    assert task.workload.op == "gemm" and lanes is not None
    assert {c["nr"] for c in task.choice.candidates} <= {lanes, 2 * lanes}  # one or two registers wide
    assert task.choice.default["nr"] == 2 * lanes
    assert task.choice.work == 24 * 48 * 40


def test_a_cortex_m_matmul_tunes_the_plain_tile_not_a_microkernel():
    ops = {t.workload.op for t in extract_tasks(small_matmul(), "c -mcpu=cortex-m7")}
    assert ops == {"matmul", "kernel_flags"}  # (every Cortex-M kernel also tunes its gcc options)


def test_a_time_budget_goes_to_the_costliest_workload_first():
    a = relay.Var("a", relay.TensorType((16, 16), "float32"))
    big = relay.const(np.ones((16, 256), np.float32))
    small = relay.const(np.ones((16, 16), np.float32))
    mod = relay.IRModule.from_expr(relay.Function((a,), relay.Tuple((matmul.matmul(a, small),
                                                                     matmul.matmul(a, big)))))
    tasks = extract_tasks(mod, "c")
    assert [t.weight for t in tasks] == [16 * 16 * 16, 16 * 256 * 16]  # in execution order
    messages: list[str] = []
    tuned = tune(mod, "c", budget=0.0, progress=messages.append)
    assert tuned.measured == 0
    spent = [m for m in messages if "time budget spent" in m]
    assert len(spent) == 2 and '"n":256' in spent[0]


# ------------------------------------------------------------------ the tuner on them (compiles C)


def test_the_tuner_measures_and_records_the_region_plans_of_a_dilated_conv(tmp_path):
    mod = dilated_conv(6)
    path = tmp_path / "log.json"
    tuned = tune(mod, "c", log=path, trials=2, repeat=1)
    log = TuningLog.load(path)
    regions = [r for r in log.records if r.workload.op == "conv2d_regions"]
    assert len(regions) == 2 and all(r.cpu == cpu_key() and r.target == "c" for r in regions)
    assert {r.workload.op for r in log.records} >= {"conv2d_regions", "conv2d"}
    result = next(r for r in tuned.results if r.task.workload.op == "conv2d_regions")
    assert result.best in result.task.choice.candidates


def test_every_region_plan_the_log_may_pick_builds_the_same_convolution():
    mod = dilated_conv(6)
    x = np.random.default_rng(3).standard_normal((1, 8, 9, 11)).astype(np.float32)
    expected = dilated_conv_reference(x, 6)
    (task,) = [t for t in extract_tasks(mod, "c") if t.workload.op == "conv2d_regions"]
    sources = set()
    for config in task.choice.candidates:
        log = TuningLog([Record(task.workload, dict(config), 1e-9, "c", cpu=cpu_key())])
        lib = tessera.build(mod, ctx=PassContext(config={LOG_CONFIG_KEY: log}))
        np.testing.assert_allclose(lib(x)[0], expected, rtol=1e-4, atol=1e-4)
        sources.add(repr(lib.c_sources))
    assert len(sources) == len(task.choice.candidates)  # each plan is a different kernel


def test_a_log_of_another_cpu_leaves_the_build_untuned_and_byte_identical():
    mod = dilated_conv(12, (20, 22))
    (task,) = [t for t in extract_tasks(mod, "c") if t.workload.op == "conv2d_regions"]
    other = next(dict(c) for c in task.choice.candidates if c != task.choice.default)
    log = TuningLog([Record(task.workload, other, 1e-9, "c", cpu="Some Other CPU (x86-64-v2)")])
    plain = tessera.build(mod)
    with pytest.warns(OtherCpuWarning):
        elsewhere = tessera.build(mod, ctx=PassContext(config={LOG_CONFIG_KEY: log}))
    assert elsewhere.c_sources == plain.c_sources
    here = TuningLog([Record(task.workload, other, 1e-9, "c", cpu=cpu_key())])
    assert tessera.build(mod, ctx=PassContext(config={LOG_CONFIG_KEY: here})).c_sources != plain.c_sources


def test_the_tuner_records_the_gemm_microkernel_and_the_tuned_build_is_correct(tmp_path):
    mod = small_matmul()
    path = tmp_path / "log.json"
    tune(mod, "c", log=path, trials=2, repeat=1)
    (task,) = extract_tasks(mod, "c")
    records = TuningLog.load(path).records
    assert {r.workload for r in records} == {task.workload}
    assert len(records) == min(2, len(task.choice.candidates)) and all(r.cpu == cpu_key() for r in records)
    a = np.random.default_rng(4).standard_normal((24, 40)).astype(np.float32)
    with PassContext(config={LOG_CONFIG_KEY: str(path)}):
        out = tessera.build(mod)(a)[0]
    np.testing.assert_allclose(out, a @ MATMUL_B, rtol=1e-4, atol=1e-4)


def test_resuming_on_another_cpu_measures_afresh(tmp_path):
    mod = small_matmul()
    (task,) = extract_tasks(mod, "c")
    path = tmp_path / "log.json"
    TuningLog([Record(task.workload, dict(task.choice.default), 1e-3, "c", cpu="Some Other CPU (x86-64-v2)")]
              ).save(path)
    messages: list[str] = []
    tuned = tune(mod, "c", log=path, trials=1, repeat=1, progress=messages.append)
    assert tuned.measured == 1
    assert any("made on other CPUs (Some Other CPU (x86-64-v2)): this CPU" in m for m in messages)
    assert sorted(r.cpu for r in TuningLog.load(path).records) == sorted([cpu_key(), "Some Other CPU (x86-64-v2)"])


def test_tessera_compile_says_when_the_log_is_from_another_cpu(tmp_path, capsys):
    from onnx import TensorProto, helper, numpy_helper, save

    from tessera.cli import main

    conv_node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[12] * 4, dilations=[12, 12])
    graph = helper.make_graph([conv_node], "dilated", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                     [1, 8, 20, 22])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(CONV_WEIGHT, "w")])
    model = tmp_path / "dilated.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    (task,) = [t for t in extract_tasks(dilated_conv(12, (20, 22)), "c") if t.workload.op == "conv2d_regions"]
    log = tmp_path / "log.json"
    TuningLog([Record(task.workload, dict(task.choice.default), 1e-3, "c", cpu="Some Other CPU (x86-64-v2)")]
              ).save(log)
    assert main(["compile", str(model), "--tuning-log", str(log), "-o", str(tmp_path / "m.so"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "tessera: warning: tuning log: 1 of its 1 measurements were made on another CPU" in err
    assert "Traceback" not in err and "lower_te.py" not in err


def test_tuning_the_avx2_path_records_its_target_and_steers_only_its_builds(tmp_path):
    from tessera.target.simd import missing_level_features

    if missing_level_features("x86-64-v3"):
        pytest.skip("this CPU cannot run x86-64-v3 code")
    mod, avx2 = small_matmul(), "c -mcpu=x86-64-v3"
    path = tmp_path / "log.json"
    tune(mod, avx2, log=path, trials=2, repeat=1)
    records = TuningLog.load(path).records
    assert {(r.target, r.cpu) for r in records} == {(avx2, cpu_key())}
    assert all(r.config["nr"] in (8, 16) for r in records)  # AVX2 microkernels only
    (task,) = extract_tasks(mod, avx2)
    other = next(c for c in task.choice.candidates if c != task.choice.default)
    log = TuningLog([Record(task.workload, dict(other), 1e-9, avx2, cpu=cpu_key())])
    assert ScheduleContext(Target(avx2), log).choose(task.workload.op, json.loads(task.workload.key),
                                                     task.choice.candidates, task.choice.default) == other
    assert ScheduleContext(C, log).choose(task.workload.op, json.loads(task.workload.key),
                                          task.choice.candidates, task.choice.default) == task.choice.default
