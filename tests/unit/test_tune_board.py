"""`tessera tune --board`: instruction counts under QEMU pick per-kernel gcc options on Cortex-M."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest

import tessera
from tessera.backend.kernel_flags import FLAG_CHOICES, OP
from tessera.backend.lower_te import LowerTE
from tessera.cli import main
from tessera.errors import TesseraError
from tessera.frontend import from_onnx
from tessera.op.schedule_context import ScheduleContext
from tessera.target import Target
from tessera.testing import mlperf_tiny as mt
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.transform import PassContext
from tessera.tune import Record, TuningLog, Workload, extract_tasks, tune

logging.getLogger().setLevel(logging.ERROR)
BOARD, M4 = "mps2-an386", "c -mcpu=cortex-m4"
NAME = "ad_autoencoder"
WORKLOAD = Workload.of("toy", {"n": 1})


# ------------------------------------------------------------------ the log (no C compiler)


def test_board_records_rank_by_instructions_and_round_trip(tmp_path):
    log = TuningLog([Record(WORKLOAD, {"a": 1}, 0.0, M4, BOARD, 900),
                     Record(WORKLOAD, {"a": 2}, 0.0, M4, BOARD, 700),
                     Record(WORKLOAD, {"a": 4}, 0.0, M4, BOARD, 800)])
    assert log.best(WORKLOAD, target=M4) == {"a": 2}
    log.save(tmp_path / "log.json")
    rows = json.loads((tmp_path / "log.json").read_text())
    assert {(r["board"], r["instructions"]) for r in rows} == {(BOARD, 700), (BOARD, 800), (BOARD, 900)}
    again = TuningLog.load(tmp_path / "log.json")
    assert again.best(WORKLOAD, target=M4) == {"a": 2}
    assert again.measured(WORKLOAD, {"a": 1}, M4, BOARD) and not again.measured(WORKLOAD, {"a": 1}, M4)
    # a host log keeps its old format: no board fields
    TuningLog([Record(WORKLOAD, {"a": 1}, 1e-3, "c")]).save(tmp_path / "host.json")
    assert set(json.loads((tmp_path / "host.json").read_text())[0]) == {"op", "key", "config", "seconds", "target"}


def test_board_counts_do_not_steer_host_builds():
    log = TuningLog([Record(WORKLOAD, {"a": 4}, 0.0, M4, BOARD, 10)])
    choose = lambda target: ScheduleContext(Target(target), log).choose("toy", {"n": 1}, [{"a": 2}, {"a": 4}], {"a": 2})
    assert choose(M4) == {"a": 4}
    assert choose("c") == {"a": 2}
    assert choose("c -mcpu=cortex-m7") == {"a": 2}


# ------------------------------------------------------------------ the knob


@pytest.fixture(scope="module")
def ad():
    model = onnx.load(q8.model_path(NAME))
    mod, params = from_onnx(model)
    return mod, params


def test_only_cortex_m_kernels_ask_for_compiler_flags(ad):
    mod, params = ad
    assert not [t for t in extract_tasks(mod, "c", params) if t.workload.op == OP]
    tasks = [t for t in extract_tasks(mod, M4, params) if t.workload.op == OP]
    assert tasks and all(len(t.choice.candidates) == len(FLAG_CHOICES) and t.choice.default == {"flags": 0}
                         for t in tasks)


def test_a_forced_flag_choice_becomes_a_gcc_attribute_on_that_kernel_only(ad):
    mod, params = ad
    tasks = [t for t in extract_tasks(mod, M4, params) if t.workload.op == OP]
    default = tessera.build(mod, target=M4, params=params, executor="aot", mod_name=NAME)
    text = "\n".join(s.text for s in default.sources() if s.name.endswith(".c"))
    assert "optimize(" not in text  # untuned builds: the C text is what it was
    log = TuningLog([Record(tasks[0].workload, {"flags": 1}, 0.0, M4, BOARD, 1)])
    with PassContext(config={"tune.log": log}):
        tuned = tessera.build(mod, target=M4, params=params, executor="aot", mod_name=NAME)
    text = "\n".join(s.text for s in tuned.sources() if s.name.endswith(".c"))
    assert text.count('__attribute__((optimize("O2")))') == 1


def test_a_board_must_match_the_target(ad):
    mod, params = ad
    with pytest.raises(TesseraError, match="cortex-m4"):
        tune(mod, "c -mcpu=cortex-m7", params, board=BOARD)


# ------------------------------------------------------------------ tuning on the board (QEMU)


@pytest.fixture(scope="module")
def tuned_log(tmp_path_factory):
    log = tmp_path_factory.mktemp("board") / "ad.tune.json"
    assert main(["tune", str(q8.model_path(NAME)), "--board", BOARD, "-o", str(log), "-q"]) == 0
    return log


def test_tuned_kernels_count_no_more_instructions_than_the_defaults(tuned_log, ad):
    mod, params = ad
    log = TuningLog.load(tuned_log)
    assert log.records and all(r.board == BOARD and r.target == M4 and r.instructions > 0 for r in log.records)
    # resuming measures nothing, and reports each workload's best and default counts
    again = tune(mod, params=params, board=BOARD, log=tuned_log)
    assert again.measured == 0 and again.results
    for result in again.results:
        assert result.best_instructions <= result.default_instructions
        assert len(result.instructions) == len(result.task.choice.candidates)
        assert result.best_instructions == min(result.instructions.values())


def test_applying_the_board_log_is_bit_exact_and_counts_no_more(tuned_log, ad):
    mod, params = ad
    x = mt.sample_input(NAME)
    runs = {}
    for log in (None, str(tuned_log)):
        with PassContext(config={"tune.log": log} if log else {}):
            lib = tessera.build(mod, target=M4, params=params, executor="aot", mod_name=NAME)
        outputs, run = lib.run_board(BOARD, [x], count_instructions=True)
        runs[log] = outputs[0], run.inference_instructions
    np.testing.assert_array_equal(runs[str(tuned_log)][0], runs[None][0])
    assert runs[str(tuned_log)][1] <= runs[None][1]


def test_cli_tune_board_resumes_and_compile_applies_the_log(tuned_log, tmp_path, capsys):
    capsys.readouterr()
    assert main(["tune", str(q8.model_path(NAME)), "--board", BOARD, "-o", str(tuned_log)]) == 0
    out = capsys.readouterr().out
    assert "0 configurations measured" in out and f"sum over kernels on {BOARD}: default schedules" in out
    tar = tmp_path / "ad.tar"
    assert main(["compile", str(q8.model_path(NAME)), "-t", M4, "--tuning-log", str(tuned_log), "-o", str(tar),
                 "-q"]) == 0
    assert main(["run", str(tar), "--board", BOARD, "--random-input", "--check", "-q"]) == 0
    assert "CHECK OK" in capsys.readouterr().out


def test_equal_counts_keep_the_default():
    log = TuningLog([Record(WORKLOAD, {"a": 4}, 0.0, M4, BOARD, 500),
                     Record(WORKLOAD, {"a": 2}, 0.0, M4, BOARD, 500),
                     Record(WORKLOAD, {"a": 1}, 0.0, M4, BOARD, 600)])
    sched = ScheduleContext(Target(M4), log)
    assert sched.choose("toy", {"n": 1}, [{"a": 1}, {"a": 2}, {"a": 4}], {"a": 2}) == {"a": 2}
    assert sched.choose("toy", {"n": 1}, [{"a": 1}, {"a": 4}], {"a": 1}) == {"a": 4}


def test_cli_names_the_valid_boards(tmp_path, capsys):
    assert main(["tune", str(q8.model_path(NAME)), "--board", "mps2-nope", "-o", str(tmp_path / "x.json")]) != 0
    err = capsys.readouterr().err
    assert "mps2-nope" in err and "mps2-an386" in err
    assert not (tmp_path / "x.json").exists()


def test_a_cortex_m_target_without_a_board_is_refused_with_a_hint(ad):
    mod, params = ad
    with pytest.raises(TesseraError, match="--board"):
        tune(mod, M4, params)
