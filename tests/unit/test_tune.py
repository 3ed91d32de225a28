"""Schedule tuning: the knobs' precedence, the log, the tuner and `tessera tune`."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import relay
from tessera.cli import main
from tessera.errors import TesseraError
from tessera.frontend import from_onnx
from tessera.transform import PassContext
from tessera.tune import LOG_CONFIG_KEY, Record, TuningLog, Workload, choose, collect, extract_tasks, forced, tune

CANDIDATES = [{"a": 1}, {"a": 2}, {"a": 4}]
DEFAULT = {"a": 2}
WORKLOAD = Workload.of("toy", {"n": 3})


def _log(*rows: tuple[dict[str, int], float]) -> TuningLog:
    return TuningLog([Record(WORKLOAD, config, seconds, "c") for config, seconds in rows])


def _choose() -> dict[str, int]:
    return choose("toy", {"n": 3}, CANDIDATES, DEFAULT)


# ------------------------------------------------------------------ knobs and log (no C compiler)


def test_choose_answers_forced_then_log_then_default():
    assert _choose() == DEFAULT
    log = _log(({"a": 1}, 2e-3), ({"a": 4}, 1e-3), ({"a": 2}, 3e-3))
    with PassContext(config={LOG_CONFIG_KEY: log}):
        assert _choose() == {"a": 4}
        with forced({WORKLOAD: {"a": 1}}):
            assert _choose() == {"a": 1}
        with forced({Workload.of("toy", {"n": 4}): {"a": 1}}):  # another workload: the log still answers
            assert _choose() == {"a": 4}
    assert _choose() == DEFAULT


def test_log_entries_outside_the_candidates_are_ignored():
    faster_but_unknown = ({"a": 8}, 1e-6)
    with PassContext(config={LOG_CONFIG_KEY: _log(faster_but_unknown, ({"a": 1}, 1e-3))}):
        assert _choose() == {"a": 1}
    with PassContext(config={LOG_CONFIG_KEY: _log(faster_but_unknown, ({"b": 2}, 1e-6))}):
        assert _choose() == DEFAULT


def test_collect_reports_every_workload_once_with_its_candidates():
    with collect() as seen:
        _choose()
        _choose()
        choose("toy", {"n": 5}, CANDIDATES, DEFAULT)
    assert list(seen) == [WORKLOAD, Workload.of("toy", {"n": 5})]
    assert seen[WORKLOAD].candidates == tuple(CANDIDATES) and seen[WORKLOAD].default == DEFAULT


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


def _conv_net() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 4, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 16, 3, 3)).astype(np.float32) * 0.1, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"], strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 20, 20])],
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
def tuned(convnet, tmp_path_factory):
    _, mod, params = convnet
    log = tmp_path_factory.mktemp("tuned") / "log.json"
    messages: list[str] = []
    result = tune(mod, "c", params, log=log, trials=3, repeat=3, progress=messages.append)
    return log, result, messages


def test_finding_workloads_runs_no_c_compiler(convnet, monkeypatch):
    def no_gcc(*args, **kwargs):
        raise AssertionError("the C compiler ran")

    monkeypatch.setattr("tessera.runtime.module.link_shared_library", no_gcc)
    _, mod, params = convnet
    tasks = extract_tasks(mod, "c", params)
    assert [t.workload.op for t in tasks] == ["conv2d", "conv2d"]
    assert [json.loads(t.workload.key)["out"] for t in tasks] == [[1, 16, 20, 20], [1, 8, 9, 9]]
    for t in tasks:
        assert t.kernel.attrs.primitive and t.choice.default in t.choice.candidates


def test_tuner_measures_each_workload_and_logs_a_best_config(tuned, convnet):
    log_path, result, messages = tuned
    _, mod, params = convnet
    log = TuningLog.load(log_path)
    tasks = extract_tasks(mod, "c", params)
    per_workload = Counter(r.workload for r in log.records)
    assert per_workload == {t.workload: 3 for t in tasks}  # trials=3, the default among them
    for t in tasks:
        assert log.measured(t.workload, t.choice.default, "c")
        best = log.best(t.workload)
        assert best in t.choice.candidates
        assert all(r.seconds > 0 for r in log.records)
    assert result.measured == 6 and len(result.results) == 2
    assert any(m.startswith("[2/2]") and "best" in m for m in messages)


def test_build_with_the_log_matches_a_build_without(tuned, convnet):
    log_path, _, _ = tuned
    _, mod, params = convnet
    x = np.random.default_rng(1).standard_normal((1, 4, 20, 20)).astype(np.float32)
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
    x = np.random.default_rng(2).standard_normal((1, 4, 20, 20)).astype(np.float32)
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
    assert more.measured == 2  # one new configuration per workload
    assert len(TuningLog.load(copy).records) == 8


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
    w = np.ones((16, 16, 3, 3), np.float32)
    mod = relay.IRModule.from_expr(relay.Function(
        (x,), conv.conv2d(x, relay.const(w), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))))
    widths = {}
    for target in ("c -march=haswell", "c -march=icelake-server"):
        (task,) = extract_tasks(mod, target)
        widths[target] = task.choice.default["width"]
    assert widths == {"c -march=haswell": 16, "c -march=icelake-server": 32}
