"""Artefacts are replaced atomically (issue 14, item 5).

Interrupting `tessera compile -o model.so` over a good library used to
leave a 0-byte or half-written file. Now every write goes to a staging
folder beside the target and is renamed over it: at any moment the path
holds the old file or the whole new one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tessera
from tessera.errors import ArtifactError
from tessera.util.atomic import atomic_directory, atomic_write_bytes, atomic_write_text, atomic_writer

SRC = Path(tessera.__file__).resolve().parents[1]


def test_atomic_write_replaces_the_file_and_leaves_nothing_else(tmp_path):
    target = tmp_path / "out" / "report.html"
    atomic_write_text(target, "old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert os.listdir(target.parent) == ["report.html"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # not mkstemp's 0600


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_interrupted_writer_keeps_the_old_file(tmp_path, interrupt):
    target = tmp_path / "model.so"
    target.write_bytes(b"good library")
    with pytest.raises(interrupt):
        with atomic_writer(target) as staged:
            staged.write_bytes(b"half")
            raise interrupt()
    assert target.read_bytes() == b"good library"
    assert os.listdir(tmp_path) == ["model.so"]


def test_tool_that_writes_nothing_is_an_error(tmp_path):
    with pytest.raises(ArtifactError, match="produced no file"):
        with atomic_writer(tmp_path / "model.so"):
            pass
    assert os.listdir(tmp_path) == []


def test_writing_over_a_folder_is_an_artifact_error(tmp_path):
    (tmp_path / "model.so").mkdir()
    with pytest.raises(ArtifactError, match="model.so: it is a folder"):
        atomic_write_bytes(tmp_path / "model.so", b"x")


def test_atomic_directory_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "mlf"
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(target) as staged:
            (staged / "a.c").write_text("int a;")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []
    with atomic_directory(target) as staged:
        (staged / "a.c").write_text("int a;")
    assert (target / "a.c").read_text() == "int a;" and os.listdir(tmp_path) == ["mlf"]
    with pytest.raises(ArtifactError, match="already exists"):
        with atomic_directory(target):
            pass


# An export in a child process, interrupted (KeyboardInterrupt) at its k-th step that writes
# to the file system, for every k. The audit hook sees each step before it happens; opening
# the target itself for writing is let through as far as the open's own effect (O_TRUNC).
INTERRUPT_SCRIPT = r"""
import json, os, sys
from pathlib import Path
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import tessera
from tessera.frontend import from_onnx

target = Path(sys.argv[1])
WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
state = {"armed": 0, "count": 0}

def hook(event, args):
    if state["armed"] == 0:
        return
    if event == "open":
        path, mode, flags = args
        if not isinstance(flags, int) or not flags & WRITING:
            return
    elif event not in ("os.rename", "subprocess.Popen", "shutil.copyfile"):
        return
    state["count"] += 1
    if state["count"] == state["armed"]:
        if event == "open" and flags & os.O_TRUNC and isinstance(path, (str, os.PathLike)) \
                and Path(path).resolve() == target.resolve() and target.is_file():
            os.truncate(target, 0)  # the open itself has happened; the process dies right after it
        raise KeyboardInterrupt

sys.addaudithook(hook)

def lib(seed):
    w = np.random.default_rng(seed).standard_normal((16, 16)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              [numpy_helper.from_array(w, "w")])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    return tessera.build(mod, params=params, executor=sys.argv[2], mod_name="m")

def snapshot(path):
    return path.read_bytes().hex() if path.exists() else None

old_lib, new_lib = lib(0), lib(1)
fresh = target.with_name("fresh" + target.suffix)
new_lib.export_library(fresh)
new = snapshot(fresh)
old_lib.export_library(target)
state["armed"], state["count"] = -1, 0
new_lib.export_library(target)  # count the steps
steps = state["count"]
outcomes = []
for k in range(1, steps + 1):
    state["armed"] = 0
    old_lib.export_library(target)
    before = snapshot(target)
    state["armed"], state["count"] = k, 0
    try:
        new_lib.export_library(target)
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    state["armed"] = 0
    now = snapshot(target)
    leftovers = [n for n in os.listdir(target.parent) if n.startswith(".tessera-tmp-")]
    outcomes.append({"k": k, "interrupted": interrupted, "old": now == before, "new": now == new,
                     "leftovers": leftovers})
print(json.dumps({"steps": steps, "outcomes": outcomes}))
"""


@pytest.mark.parametrize("name, executor", [("model.so", "graph"), ("model.tar", "aot")])
def test_export_interrupted_at_any_step_leaves_the_old_or_the_new_file(tmp_path, name, executor):
    target = tmp_path / name
    env = {**os.environ, "PYTHONPATH": str(SRC), "TESSERA_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", INTERRUPT_SCRIPT, str(target), executor], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["steps"] >= 2
    for outcome in report["outcomes"]:
        assert outcome["old"] or outcome["new"], f"step {outcome['k']} of {report['steps']}: {outcome}"
        assert outcome["leftovers"] == [], outcome
    assert any(o["interrupted"] for o in report["outcomes"])
