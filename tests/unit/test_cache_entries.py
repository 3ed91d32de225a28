"""Damaged cache entries are rebuilt, never trusted (issue 14, item 5).

Each test uses its own cache folder, damages entries the way a crash or a
full disk would (truncated, emptied, bits flipped, sidecar lost) and shows
the next use rebuilds them and works. Before, a truncated `.o` in the
kernel cache made later builds fail, or link into a broken library.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.util.digest import intact, sha256_file, sidecar


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(root))
    return root


W = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)
X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)


def _build():
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [numpy_helper.from_array(W, "w")])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    return tessera.build(mod, params=params)


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _flip_middle(p: Path) -> None:
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    p.write_bytes(bytes(data))


def _drop_sidecar(p: Path) -> None:
    sidecar(p).unlink()


def _wrong_sidecar(p: Path) -> None:
    sidecar(p).write_text(f"{'0' * 64}  {p.name}\n")


DAMAGE = {"truncated": _truncate, "empty": _empty, "corrupt": _flip_middle, "no-sidecar": _drop_sidecar,
          "wrong-sidecar": _wrong_sidecar}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_cached_objects_are_rebuilt(cache, damage):
    expected = np.maximum(X @ W, 0)
    np.testing.assert_allclose(_build()(X)[0], expected, rtol=1e-5, atol=1e-5)
    objects = sorted((cache / "objects").glob("*.o"))
    assert objects and all(intact(o) for o in objects)
    good = {o.name: o.read_bytes() for o in objects}
    for o in objects:
        DAMAGE[damage](o)
    assert not any(intact(o) for o in objects)
    np.testing.assert_allclose(_build()(X)[0], expected, rtol=1e-5, atol=1e-5)
    assert sorted((cache / "objects").glob("*.o")) == objects  # the same entries, rebuilt in place
    assert all(intact(o) for o in objects) and {o.name: o.read_bytes() for o in objects} == good


def test_damaged_qemu_plugin_is_rebuilt(cache):
    if shutil.which("gcc") is None:
        pytest.skip("the plugin is built with the host gcc")
    from tessera.micro.plugin import plugin_path

    first = plugin_path()
    digest = sha256_file(first)
    _truncate(first)
    again = plugin_path()
    assert again == first and intact(again) and sha256_file(again) == digest


def test_damaged_cached_model_file_is_rebuilt(cache):
    from tessera.testing import mlperf_tiny

    path = mlperf_tiny.model_path("ad_autoencoder")
    good = path.read_bytes()
    _truncate(path)
    assert mlperf_tiny.model_path("ad_autoencoder") == path and path.read_bytes() == good
    onnx.checker.check_model(onnx.load(path))


def test_damaged_aot_project_folder_is_replaced(cache, tmp_path):
    from tessera.backend.aot.runner import stable_copy

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "r",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    lib = tessera.build(mod, params=params, executor="aot", mod_name="r")
    folder = lib.export_library(tmp_path / "mlf")
    stable = stable_copy(folder)
    header = next(stable.glob("codegen/host/include/*.h"))
    good = header.read_bytes()
    header.write_bytes(b"")
    assert stable_copy(folder) == stable and header.read_bytes() == good
    np.testing.assert_array_equal(lib.run_host([np.array([-1, 2, -3, 4], np.float32)])[0], [0, 2, 0, 4])
