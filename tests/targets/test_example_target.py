"""The example out-of-tree target (examples/tessera-example-target), installed, driven from the CLI.

The package is installed with pip into a temporary folder (a wheel made from
its pyproject.toml, so no build backend or network is needed) and the CLI
runs in a subprocess with only that folder and tessera on the path: the
kind comes from the installed entry point, or from `--load` with the
package's module alone (no metadata) on the path.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import re
import tarfile
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tessera-example-target"
MODULE = EXAMPLE / "src" / "tessera_example_target" / "__init__.py"
KERNEL = "exaccel_matmul_f32"
GUIDE = ROOT / "docs" / "adding-a-target.md"


def _wheel(out: Path) -> Path:
    """A wheel of the example, from the name, version and entry points its pyproject.toml declares."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    dist = f"{project['name'].replace('-', '_')}-{project['version']}"
    src = EXAMPLE / "src"
    files = {p.relative_to(src).as_posix(): p.read_bytes() for p in sorted(src.rglob("*"))
             if p.is_file() and p.suffix in (".py", ".c")}
    entry_points = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
                           for group, eps in project["entry-points"].items())
    files[f"{dist}.dist-info/METADATA"] = (f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                           f"Version: {project['version']}\n").encode()
    files[f"{dist}.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tessera-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist}.dist-info/entry_points.txt"] = entry_points.encode()
    digest = lambda data: base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()  # noqa: E731
    record = [f"{name},sha256={digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n").encode()
    wheel = out / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("example-target")
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
                    "--target", str(site), str(_wheel(tmp))], check=True, capture_output=True, text=True)
    return site


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, Path, np.ndarray]:
    """Two float32 matmuls with a ReLU between: the matmuls go to exaccel, the ReLU stays on the host."""
    tmp = tmp_path_factory.mktemp("example-model")
    rng = np.random.default_rng(7)
    w1, w2 = rng.standard_normal((16, 8), np.float32), rng.standard_normal((8, 5), np.float32)
    x = rng.standard_normal((4, 16), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    path = tmp / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    np.save(tmp / "x.npy", x)
    return path, tmp / "x.npy", np.maximum(x @ w1, 0) @ w2


def _tessera(args: list[str], path: Path, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT / "src")])}
    proc = subprocess.run([sys.executable, "-m", "tessera", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _module_only(installed: Path, tmp_path: Path) -> Path:
    """The installed package without its metadata: found only by `--load`."""
    shutil.copytree(installed / "tessera_example_target", tmp_path / "plain" / "tessera_example_target")
    return tmp_path / "plain"


def test_the_example_module_is_at_most_150_lines():
    assert len(MODULE.read_text().splitlines()) <= 150


def test_targets_lists_the_kind_with_its_distribution(installed, tmp_path):
    out = _tessera(["targets", "exaccel"], installed, tmp_path)
    assert "hooks: RelayToTIR, TIRToRuntime" in out and "fields: pattern_table" in out
    assert "from: distribution tessera-example-target 0.1.0, entry point 'exaccel'" in out
    shown = re.search(r"`(from: distribution tessera-example-target[^`]*)`", GUIDE.read_text())
    assert shown is not None and shown.group(1) in out  # docs/adding-a-target.md quotes the line


@pytest.mark.parametrize("how", ["entry point", "--load"])
def test_graph_executor_runs_the_kinds_kernel(how, installed, model, tmp_path):
    onnx_path, x_path, expected = model
    path, load = (installed, []) if how == "entry point" else (_module_only(installed, tmp_path),
                                                              ["--load", "tessera_example_target"])
    _tessera(["compile", str(onnx_path), "-t", "exaccel", "-o", "m.so", "--emit-c", "c", "-q", *load], path, tmp_path)
    generated = (tmp_path / "c" / "exaccel_0.c").read_text()
    assert generated.count(f"{KERNEL}(p0, p1, out, ") == 2  # both matmuls call the package's function
    _tessera(["run", "m.so", "--input", f"x={x_path}", "--output", "y.npz", "-q"], path, tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["arr_0"], expected, rtol=1e-5, atol=1e-5)
    if how == "--load":
        out = _tessera(["run", str(onnx_path), "-t", "exaccel", "--check", "-q", *load], path, tmp_path)
        assert "CHECK OK" in out  # against onnxruntime


def test_aot_on_a_board_ships_and_runs_the_kinds_c_file(installed, model, tmp_path):
    onnx_path, x_path, expected = model
    _tessera(["compile", str(onnx_path), "--executor", "aot", "-t", "c -mcpu=cortex-m4 -accelerators=exaccel",
              "-o", "m.tar", "-q"], installed, tmp_path)
    with tarfile.open(tmp_path / "m.tar") as tar:
        texts = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()  # type: ignore[union-attr]
                 if m.name.endswith(".c")}
    kernel_file = "codegen/host/src/tsgen_mm_exaccel_matmul.c"
    assert f"void {KERNEL}(const float *a" in texts[kernel_file]  # the package's own C file, in the MLF
    assert texts[kernel_file] == (EXAMPLE / "src" / "tessera_example_target" / "exaccel_matmul.c").read_text()
    assert texts["codegen/host/src/tsgen_mm_exaccel_0.c"].count(f"{KERNEL}(") == 3  # prototype and two calls
    _tessera(["run", "m.tar", "--board", "mps2-an386", "--input", f"x={x_path}", "--output", "y.npz", "-q"],
             installed, tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["arr_0"], expected, rtol=1e-5, atol=1e-5)
