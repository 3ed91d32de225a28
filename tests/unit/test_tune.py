"""Schedule tuning: the schedule context's precedence, the log, the tuner and `tessera tune`."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import relay
from tessera.backend.lower_te import LowerTE
from tessera.cli import main
from tessera.errors import TesseraError
from tessera.frontend import from_onnx
from tessera.target import Target
from tessera.target.cpu_id import cpu_key
from tessera.transform import PassContext
from tessera.tune import (
    LOG_CONFIG_KEY, Choice, Record, ScheduleContext, TuningLog, Workload, extract_tasks, tune,
)


CANDIDATES = [{"a": 1}, {"a": 2}, {"a": 4}]
DEFAULT = {"a": 2}
WORKLOAD = Workload.of("toy", {"n": 3})
C = Target("c")


def _log(*rows: tuple[dict[str, int], float]) -> TuningLog:
    return TuningLog([Record(WORKLOAD, config, seconds, "c") for config, seconds in rows])


def _choose(sched: ScheduleContext) -> dict[str, int]:
    return sched.choose("toy", {"n": 3}, CANDIDATES, DEFAULT)


# ------------------------------------------------------------------ schedule context and log (no C compiler)


def test_choose_answers_forced_then_log_then_default():
    assert _choose(ScheduleContext(C)) == DEFAULT
    log = _log(({"a": 1}, 2e-3), ({"a": 4}, 1e-3), ({"a": 2}, 3e-3))
    assert _choose(ScheduleContext(C, log)) == {"a": 4}
    assert _choose(ScheduleContext(C, log, forced={WORKLOAD: {"a": 1}})) == {"a": 1}
    # another workload forced: the log still answers
    assert _choose(ScheduleContext(C, log, forced={Workload.of("toy", {"n": 4}): {"a": 1}})) == {"a": 4}
    assert _choose(ScheduleContext(C, None, forced={WORKLOAD: {"a": 1}})) == {"a": 1}


def test_the_log_answers_only_for_the_target_it_was_measured_for():
    log = _log(({"a": 4}, 1e-3))
    assert _choose(ScheduleContext(Target("c -march=haswell"), log)) == DEFAULT
    log.add(Record(WORKLOAD, {"a": 1}, 1e-2, ""))  # a record without a target matches any
    assert _choose(ScheduleContext(Target("c -march=haswell"), log)) == {"a": 1}


def test_log_entries_outside_the_candidates_are_ignored():
    faster_but_unknown = ({"a": 8}, 1e-6)
    assert _choose(ScheduleContext(C, _log(faster_but_unknown, ({"a": 1}, 1e-3)))) == {"a": 1}
    assert _choose(ScheduleContext(C, _log(faster_but_unknown, ({"b": 2}, 1e-6)))) == DEFAULT


def test_the_collector_hears_every_choice_with_its_candidates():
    seen: list[Choice] = []
    sched = ScheduleContext(C, forced={WORKLOAD: {"a": 4}}, collector=seen.append)
    assert _choose(sched) == {"a": 4}  # forced choices are reported too
    sched.choose("toy", {"n": 5}, CANDIDATES, DEFAULT)
    assert [c.workload for c in seen] == [WORKLOAD, Workload.of("toy", {"n": 5})]
    assert seen[0].candidates == tuple(CANDIDATES) and seen[0].default == DEFAULT


def test_a_schedule_context_cannot_be_changed():
    forced = {WORKLOAD: {"a": 1}}
    sched = ScheduleContext(C, forced=forced)
    forced[WORKLOAD]["a"] = 4  # the caller's dicts are copied
    assert _choose(sched) == {"a": 1}
    with pytest.raises(TypeError):
        sched.forced[WORKLOAD] = {"a": 2}  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        sched.target = Target("c -march=haswell")  # type: ignore[misc]


def test_a_build_reads_the_log_from_its_pass_context_config(tmp_path):
    log = _log(({"a": 4}, 1e-3))
    assert _choose(ScheduleContext.for_build(C, {})) == DEFAULT
    assert _choose(ScheduleContext.for_build(C, {LOG_CONFIG_KEY: log})) == {"a": 4}
    path = tmp_path / "log.json"
    log.save(path)
    assert _choose(ScheduleContext.for_build(C, {LOG_CONFIG_KEY: str(path)})) == {"a": 4}
    assert _choose(ScheduleContext.for_build(C, {LOG_CONFIG_KEY: path}, forced={WORKLOAD: {"a": 1}})) == {"a": 1}
    with pytest.raises(TesseraError, match=r"config 'tune.log': got int, expected a TuningLog or the path of one"):
        ScheduleContext.for_build(C, {LOG_CONFIG_KEY: 3})


def test_lower_te_schedules_each_named_piece_for_its_own_target():
    log = _log(({"a": 4}, 1e-3))
    little, big = Target("c -mcpu=cortex-m0"), Target("c -mcpu=cortex-m7")
    lower = LowerTE(C, pieces={"little": little, "big": big}, forced={WORKLOAD: {"a": 1}})
    schedules = lower.schedules(PassContext(config={LOG_CONFIG_KEY: log}))
    assert {k: s.target for k, s in schedules.items()} == {None: C, "little": little, "big": big}
    assert all(s.log is log and s.forced == {WORKLOAD: {"a": 1}} for s in schedules.values())


def test_building_a_model_imports_no_tuner():
    """Lowering gets its schedules from LowerTE, not from the tuner (which sits above the backend)."""
    script = (
        "import sys, numpy as np, tessera\n"
        "from tessera import relay\n"
        "from tessera.op.nn import conv\n"
        "x = relay.Var('x', relay.TensorType((1, 4, 12, 12), 'float32'))\n"
        "w = relay.const(np.ones((8, 4, 3, 3), np.float32))\n"
        "y = conv.conv2d(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))\n"
        "tessera.build(relay.IRModule.from_expr(relay.Function((x,), y)), executor='aot')\n"
        "print(sorted(m for m in sys.modules if m.startswith('tessera.tune')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_log_round_trip(tmp_path):
    log = _log(({"a": 1}, 2e-3), ({"a": 4}, 1e-3))
    log.add(Record(Workload.of("other", [1, 2]), {"x": 3}, 5e-4, "c -mcpu=native"))
    path = tmp_path / "log.json"
    log.save(path)
    back = TuningLog.load(path)
    assert sorted(back.records, key=str) == sorted(log.records, key=str)
    assert back.best(WORKLOAD) == {"a": 4}
    assert back.best(WORKLOAD, among=[{"a": 1}]) == {"a": 1}
    assert back.measured(WORKLOAD, {"a": 1}, "c") and not back.measured(WORKLOAD, {"a": 1}, "blas")
    assert back.best(Workload.of("nobody", 0)) is None


@pytest.mark.parametrize("text, message", [
    ("{", "is malformed"),
    ('[{"op": "conv2d", "key": "{}"}]', "is malformed .*'config'"),
    ('[{"op": "conv2d", "key": "{}", "config": {"c": "x"}, "seconds": 1}]', "is malformed"),
])
def test_malformed_logs_are_errors(tmp_path, text, message):
    path = tmp_path / "log.json"
    path.write_text(text)
    with pytest.raises(TesseraError, match=message):
        TuningLog.load(path)


def test_missing_log_says_how_to_make_one(tmp_path):
    with pytest.raises(TesseraError, match=r"does not exist \(make one with `tessera tune"):
        TuningLog.load(tmp_path / "none.json")


# ------------------------------------------------------------------ the tuner on a small conv net


def _conv_net(channels: int = 12) -> onnx.ModelProto:
    """Two convolutions, `channels` then 8 output channels. The default 12 is fewer than AVX2's GEMM over
    planes takes (conv_planes_gemm, which has no knobs), so both keep the tunable planar tiles on any x86-64.
    The input's 8 channels are more than a stem's (STEM_MAX_CHANNELS: AVX-512 would take a stem's GEMM too)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((channels, 8, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, channels, 3, 3)).astype(np.float32) * 0.1, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"], strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def convnet(tmp_path_factory):
    path = tmp_path_factory.mktemp("convnet") / "convnet.onnx"
    onnx.save(_conv_net(), path)
    mod, params = from_onnx(str(path))
    return path, mod, params


@pytest.fixture(scope="module")
def convnet16():
    """The net with 16 channels first: tile defaults that differ between Cortex-M and AVX-512 (built, never run)."""
    return from_onnx(_conv_net(16))


@pytest.fixture(scope="module")
def tuned(convnet, tmp_path_factory):
    _, mod, params = convnet
    log = tmp_path_factory.mktemp("tuned") / "log.json"
    messages: list[str] = []
    result = tune(mod, "c", params, log=log, trials=3, repeat=3, progress=messages.append)
    return log, result, messages


def test_finding_workloads_runs_no_c_compiler(convnet16, monkeypatch):
    def no_gcc(*args, **kwargs):
        raise AssertionError("the C compiler ran")

    monkeypatch.setattr("tessera.runtime.module.link_shared_library", no_gcc)
    mod, params = convnet16
    tasks = extract_tasks(mod, "c -mcpu=x86-64-v4", params)  # (on AVX2 the small map's conv is blocked)
    assert [t.workload.op for t in tasks] == ["conv2d", "conv2d"]
    assert [json.loads(t.workload.key)["out"] for t in tasks] == [[1, 16, 20, 20], [1, 8, 9, 9]]
    for t in tasks:
        assert t.kernel.attrs.primitive and t.choice.default in t.choice.candidates


def test_cortex_m_convolutions_default_to_the_tile_the_board_tuner_found(convnet16):
    """16 channels x 16 positions on a Cortex-M (scalar FPU); host tiles follow the vector width."""
    mod, params = convnet16
    m4 = {t.workload.key: dict(t.choice.default) for t in extract_tasks(mod, "c -mcpu=cortex-m4", params)
          if t.workload.op == "conv2d"}
    host = {t.workload.key: dict(t.choice.default) for t in extract_tasks(mod, "c -march=x86-64-v4", params)}
    first, second = m4  # 16 output channels, then 8: the widest channel tile that divides
    assert (m4[first]["channels"], m4[first]["width"]) == (16, 16)
    assert (m4[second]["channels"], m4[second]["width"]) == (8, 16)
    assert host[first]["channels"] == 8 and host[first]["width"] == 32  # two AVX-512 vectors


def test_tuner_measures_each_workload_and_logs_a_best_config(tuned, convnet):
    log_path, result, messages = tuned
    _, mod, params = convnet
    log = TuningLog.load(log_path)
    tasks = extract_tasks(mod, "c", params)
    per_workload = Counter(r.workload for r in log.records)
    assert per_workload == {t.workload: 3 for t in tasks}  # trials=3, the default among them
    for t in tasks:
        assert log.measured(t.workload, t.choice.default, "c", cpu=cpu_key())
        best = log.best(t.workload)
        assert best in t.choice.candidates
        assert all(r.seconds > 0 for r in log.records)
    assert result.measured == 6 and len(result.results) == 2
    assert any(m.startswith("[2/2]") and "best" in m for m in messages)


def test_build_with_the_log_matches_a_build_without(tuned, convnet):
    log_path, _, _ = tuned
    _, mod, params = convnet
    x = np.random.default_rng(1).standard_normal((1, 8, 20, 20)).astype(np.float32)
    plain = tessera.build(mod, params=params)(x)[0]
    with PassContext(config={LOG_CONFIG_KEY: str(log_path)}):
        with_log = tessera.build(mod, params=params)(x)[0]
    np.testing.assert_allclose(with_log, plain, rtol=1e-5, atol=1e-4)


def test_a_logged_config_changes_the_generated_code(convnet):
    """The build really follows the log: make a non-default tile the fastest and look at the C."""
    _, mod, params = convnet
    tasks = extract_tasks(mod, "c", params)
    log = TuningLog()
    for t in tasks:
        other = next(c for c in t.choice.candidates if c != t.choice.default)
        log.add(Record(t.workload, dict(other), 1e-9, "c"))
        log.add(Record(t.workload, dict(t.choice.default), 1.0, "c"))
    x = np.random.default_rng(2).standard_normal((1, 8, 20, 20)).astype(np.float32)
    plain = tessera.build(mod, params=params)
    tuned = tessera.build(mod, params=params, ctx=PassContext(config={LOG_CONFIG_KEY: log}))
    assert plain.c_sources != tuned.c_sources
    np.testing.assert_allclose(tuned(x)[0], plain(x)[0], rtol=1e-5, atol=1e-4)


def test_tuning_resumes_from_an_existing_log(tuned, convnet, tmp_path):
    log_path, _, _ = tuned
    _, mod, params = convnet
    copy = tmp_path / "log.json"
    copy.write_text(Path(log_path).read_text())
    again = tune(mod, "c", params, log=copy, trials=3, repeat=1)
    assert again.measured == 0
    more = tune(mod, "c", params, log=copy, trials=4, repeat=1)
    # one new configuration per workload that has a fourth (an AVX2 blocked conv may have fewer)
    candidates = [len(t.choice.candidates) for t in extract_tasks(mod, "c", params)]
    assert more.measured == sum(1 for n in candidates if n >= 4)
    assert len(TuningLog.load(copy).records) == sum(min(n, 4) for n in candidates)


def test_cli_tune_then_compile_with_the_log(convnet, tmp_path, capsys):
    model, _, _ = convnet
    log, so = tmp_path / "log.json", tmp_path / "net.so"
    assert main(["tune", str(model), "-o", str(log), "--trials", "2", "--repeat", "1", "-q"]) == 0
    out = capsys.readouterr().out
    assert "2 tunable kernels, 4 configurations measured" in out and f"wrote {log} (4 measurements)" in out
    assert main(["compile", str(model), "--tuning-log", str(log), "-o", str(so), "-q"]) == 0
    assert main(["run", str(so), "--check", "--compare-onnx", str(model), "-q"]) == 0
    assert "CHECK OK" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [(None, "does not exist"), ("[1, 2]", "is malformed")])
def test_cli_rejects_a_bad_tuning_log(convnet, tmp_path, capsys, content, message):
    model, _, _ = convnet
    log = tmp_path / "log.json"
    if content is not None:
        log.write_text(content)
    assert main(["compile", str(model), "--tuning-log", str(log), "-o", str(tmp_path / "x.so"), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"tessera: error: tuning log {log} {message}" in err and "Traceback" not in err


def test_the_python_example_in_docs_tuning_md_runs(convnet, tmp_path, monkeypatch, capsys):
    model, _, _ = convnet
    guide = (Path(__file__).resolve().parents[2] / "docs" / "tuning.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", guide, re.S)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.onnx").write_bytes(Path(model).read_bytes())
    scope: dict[str, object] = {}
    exec(compile(example, "docs/tuning.md", "exec"), scope)
    assert len(TuningLog.load(tmp_path / "model.tune.json").records) == 4  # 2 kernels x trials=2
    assert "conv2d{" in capsys.readouterr().out
    assert scope["lib"].c_sources


def test_the_tuner_sees_the_defaults_a_build_for_its_target_uses():
    from tessera.op.nn import conv

    x = relay.Var("x", relay.TensorType((1, 16, 40, 40), "float32"))
    w = np.ones((12, 16, 3, 3), np.float32)  # planar on AVX2 too (conv_planes_gemm takes 16 channels or more)
    mod = relay.IRModule.from_expr(relay.Function(
        (x,), conv.conv2d(x, relay.const(w), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))))
    widths = {}
    for target in ("c -march=haswell", "c -march=icelake-server"):
        (task,) = extract_tasks(mod, target)
        widths[target] = task.choice.default["width"]
    assert widths == {"c -march=haswell": 16, "c -march=icelake-server": 32}
