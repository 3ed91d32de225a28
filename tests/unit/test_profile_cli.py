"""`tessera run --profile` and `--profile-trace`: the graph executor's per-kernel times from the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.cli import main
from tessera.errors import ArtifactError
from tessera.frontend import from_onnx
from tessera.runtime import GraphModule, load_module
from tessera.runtime.graph_json import parse_graph_json
from tessera.runtime.kernel_profile import KernelProfile, KernelTime, duration, profile_kernels

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
ROW = re.compile(r"^\s+(\d+)\s+([\d.]+) (us|ms)\s+([\d.]+)%\s+(\S+)\s+(.+)$")


@pytest.fixture(scope="module")
def digits_so(tmp_path_factory) -> Path:
    so = tmp_path_factory.mktemp("profile") / "digits.so"
    assert main(["compile", str(DIGITS), "-o", str(so), "-q"]) == 0
    return so


def _kernels(so: Path) -> list[dict]:
    return [n for n in json.loads(load_module(so).graph_json)["nodes"] if n["op"] == "kernel"]


def test_profile_prints_the_slowest_kernels_with_share_and_operators(digits_so, tmp_path, capsys):
    trace = tmp_path / "out" / "trace.json"
    assert main(["run", str(digits_so), "--random-input", "--profile", "--profile-trace", str(trace), "-q"]) == 0
    out = capsys.readouterr().out
    kernels = _kernels(digits_so)
    assert f"profile: {len(kernels)} kernels" in out
    rows = [m for m in map(ROW.match, out.splitlines()) if m]
    assert 1 <= len(rows) <= 10
    ops_of = {n["func"]: ", ".join(n["ops"]) for n in kernels}
    seconds = []
    for m in rows:
        step, value, unit, _, kernel, ops = m.groups()
        assert kernels[int(step)]["func"] == kernel and ops_of[kernel] == ops  # the fused operators, in order
        seconds.append(float(value) * (1e-6 if unit == "us" else 1e-3))
    assert seconds == sorted(seconds, reverse=True)
    assert any("nn.conv2d" in m[6] for m in rows)
    assert sum(float(m[4]) for m in rows) <= 100 + 0.05 * len(rows)  # each share is rounded to 0.1 %
    assert f"wrote {trace}" in out

    doc = json.loads(trace.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in events] == [n["func"] for n in kernels]
    assert [e["args"]["operators"] for e in events] == [n["ops"] for n in kernels]
    for before, after in zip(events, events[1:]):  # end to end, in execution order
        assert after["ts"] == pytest.approx(before["ts"] + before["dur"], abs=0.01)
    assert all(e["dur"] >= 0 and e["pid"] == 1 and e["tid"] == 1 for e in events)
    assert not list(trace.parent.glob(".*"))  # written atomically: no staging file left behind


def test_graph_json_records_each_kernels_fused_operators():
    mod, params = from_onnx(str(DIGITS))
    lib = tessera.build(mod, params=params)
    kernels = [n for n in json.loads(lib.graph_json)["nodes"] if n["op"] == "kernel"]
    assert all(n["ops"] for n in kernels)
    for n in kernels:  # the kernel's name is made from its first four operators
        assert "fused_" + "_".join(op.split(".")[-1] for op in n["ops"][:4]) in n["func"]
    # (a small map's convolution runs as nn.conv2d_blocked on AVX2 and AVX-512 hosts)
    assert any(op.startswith("nn.conv2d") for n in kernels for op in n["ops"])
    gm = GraphModule(lib)
    assert gm.kernel_operators() == [tuple(n["ops"]) for n in kernels]
    profile = profile_kernels(gm, repeat=2)
    assert [k.kernel for k in profile.kernels] == [n["func"] for n in kernels] and profile.repeat == 2


def test_the_profile_wakes_the_thread_pool_before_each_timed_kernel():
    """Kernels timed one at a time from Python would find the OpenMP pool asleep (a run's kernels, called one
    after another from C, do not): the library exports TSWakeThreads, and the profile calls it before each
    timed call, untimed."""
    mod, params = from_onnx(str(DIGITS))
    lib = tessera.build(mod, params=params)
    assert lib.shared_library.has_symbol("TSWakeThreads")
    gm = GraphModule(lib, num_threads=2, adaptive_threads=False)
    gm.set_input(0, np.zeros(gm.input_shape(0), gm.input_dtype(0)))
    woken: list[int] = []
    wake = gm._wake_threads
    gm._wake_threads = lambda: (woken.append(1), wake())
    times = gm.profile(repeat=3)
    assert len(woken) == 3 * len(times) and all(seconds > 0 for _, seconds in times)


def test_a_damaged_operator_list_is_refused():
    mod, params = from_onnx(str(DIGITS))
    doc = json.loads(tessera.build(mod, params=params).graph_json)
    assert parse_graph_json(json.dumps(doc).encode(), "g")["nodes"][-1]["ops"]
    next(n for n in doc["nodes"] if n["op"] == "kernel")["ops"] = ["nn.conv2d", 7]
    with pytest.raises(ArtifactError, match=r"nodes\[\d+\]\.ops: expected a list of operator names"):
        parse_graph_json(json.dumps(doc).encode(), "g")


def test_the_table_and_trace_of_known_times():
    times = [("k_conv", 0.004, ("nn.conv2d", "add", "nn.relu")), ("k_pool", 0.0005, ("nn.max_pool2d",)),
             ("k_dense", 0.0055, ("nn.dense",))]
    profile = KernelProfile(tuple(KernelTime(k, *t) for k, t in enumerate(times)), 5)
    table = profile.table(top=2)
    assert "profile: 3 kernels, 10.000 ms in all (each kernel's median of 5 calls); the 2 slowest:" in table
    lines = table.splitlines()
    assert re.match(r"\s+2\s+5.500 ms\s+55.0%\s+k_dense\s+nn.dense$", lines[2])
    assert re.match(r"\s+0\s+4.000 ms\s+40.0%\s+k_conv\s+nn.conv2d, add, nn.relu$", lines[3])
    assert lines[4] == "  (1 other kernels: 500.0 us, 5.0%)"
    events = [e for e in profile.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    assert [(e["ts"], e["dur"]) for e in events] == [(0.0, 4000.0), (4000.0, 500.0), (4500.0, 5500.0)]
    assert duration(2e-6) == "2.0 us" and duration(0.25) == "250.000 ms"


@pytest.mark.parametrize("argv, message", [
    (["--executor", "aot"], "the aot executor runs as one C program without per-kernel times. Profile a "
                            "graph-executor build instead: tessera run model.so --profile"),
    (["--board", "mps2-an500"], "--board runs the aot executor under QEMU, which has no per-kernel times "
                                "(use --count-instructions"),
])
@pytest.mark.parametrize("flag", [["--profile"], ["--profile-trace", "t.json"]])
def test_profile_where_no_per_kernel_profile_exists_says_what_would_work(argv, message, flag, tmp_path, capsys):
    assert main(["run", str(DIGITS), "--random-input", *argv, *flag]) == 2
    err = capsys.readouterr().err
    assert "--profile times each kernel of the graph executor" in err and message in err
    assert not (tmp_path / "t.json").exists()
