"""Loading an exported library checks every layer of the file (issue 14, item 6).

A damaged, truncated or foreign file gives an `ArtifactError` naming the
file and the problem: never a signal (SIGBUS from a truncated .so), and
never a raw OSError, struct.error, UnicodeDecodeError, KeyError or
JSONDecodeError from deep inside.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import ArtifactError
from tessera.frontend import from_onnx
from tessera.runtime import export as export_module
from tessera.runtime.library_file import TRAILER, seal_library
from tessera.runtime.params_blob import load_params, save_params

SRC = Path(tessera.__file__).resolve().parents[1]


def dense_model(seed: int, n: int = 16):
    """y = relu(x @ W) with seeded weights: a library that builds in a second."""
    w = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def build_dense(seed: int):
    mod, params = from_onnx(dense_model(seed))
    return tessera.build(mod, params=params)


X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, bytes]:
    path = build_dense(0).export_library(tmp_path_factory.mktemp("lib") / "dense.so")
    return path, path.read_bytes()


def _resealed(data: bytes, edit) -> bytes:
    """The library with its trailer removed, `edit` applied to the ELF bytes, and sealed again."""
    payload = bytearray(data[:-TRAILER.size])
    edit(payload)
    return bytes(payload)


def _write_sealed(path: Path, payload: bytes) -> Path:
    path.write_bytes(payload)
    seal_library(path)
    return path


def test_exported_library_round_trips(exported):
    path, _ = exported
    np.testing.assert_array_equal(tessera.load_module(path)(X)[0], build_dense(0)(X)[0])


def test_truncated_libraries_are_refused_in_a_child_without_a_signal(exported, tmp_path):
    """Before: dlopen of a truncated .so killed the process with SIGBUS."""
    _, data = exported
    lengths = [1, 4, 63, 64, 200, 4096, len(data) // 3, len(data) // 2, len(data) - TRAILER.size, len(data) - 1]
    script = "\n".join([
        "import sys, tessera",
        "for p in sys.argv[1:]:",
        "    try:",
        "        tessera.load_module(p)",
        "        print('LOADED', p)",
        "    except tessera.errors.ArtifactError as e:",
        "        print('REFUSED', e)",
    ])
    paths = []
    for n in lengths:
        paths.append(tmp_path / f"cut{n}.so")
        paths[-1].write_bytes(data[:n])
    proc = subprocess.run([sys.executable, "-c", script, *map(str, paths)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120)
    assert proc.returncode == 0, f"child died (status {proc.returncode}):\n{proc.stdout}{proc.stderr}"
    lines = proc.stdout.splitlines()
    assert len(lines) == len(lengths) and all(line.startswith("REFUSED") for line in lines), proc.stdout
    for line, n in zip(lines, lengths):
        assert f"cut{n}.so" in line and ("truncated" in line or "trailer" in line), line


@pytest.mark.parametrize("content, message", [
    (b"", "is empty"),
    (os.urandom(3000), "is not a shared library: it starts with"),
    (b"\x7fELF" + bytes(60), "is only 64 bytes"),
    (b"x" * 512 * 3, "is not a shared library"),
])
def test_files_that_are_not_libraries_are_refused(tmp_path, content, message):
    path = tmp_path / "bad.so"
    path.write_bytes(content)
    with pytest.raises(ArtifactError, match=message) as err:
        tessera.load_module(path)
    assert str(path) in str(err.value)


def test_a_tarball_or_folder_given_as_library_is_named_as_such(tmp_path):
    tar = tmp_path / "model.so"
    with tarfile.open(tar, "w") as t:
        t.add(__file__, arcname="x.py")
    with pytest.raises(ArtifactError, match="starts with a tar archive"):
        tessera.load_module(tar)
    with pytest.raises(ArtifactError, match="is a folder"):
        tessera.load_module(tmp_path)
    with pytest.raises(ArtifactError, match="no such library"):
        tessera.load_module(tmp_path / "missing.so")


def test_checksum_mismatch_is_refused(exported, tmp_path):
    _, data = exported
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0x40
    path = tmp_path / "flipped.so"
    path.write_bytes(damaged)
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        tessera.load_module(path)


def test_stripped_library_has_no_trailer(exported, tmp_path):
    path = tmp_path / "stripped.so"
    shutil.copyfile(exported[0], path)
    if shutil.which("strip") is None:
        pytest.skip("binutils strip is not installed")
    subprocess.run(["strip", str(path)], check=True)
    with pytest.raises(ArtifactError, match="no tessera checksum trailer.*strip"):
        tessera.load_module(path)


def test_library_for_another_machine_is_refused_before_dlopen(exported, tmp_path):
    def other_machine(elf: bytearray) -> None:
        struct.pack_into("<H", elf, 18, 183 if struct.unpack_from("<H", elf, 18)[0] != 183 else 62)

    path = _write_sealed(tmp_path / "arm.so", _resealed(exported[1], other_machine))
    with pytest.raises(ArtifactError, match="library for ELF machine"):
        tessera.load_module(path)


def test_segment_past_the_end_is_refused_before_dlopen(exported, tmp_path):
    """A sealed file whose loaded segment reaches past its end would SIGBUS when touched."""
    def grow_first_load(elf: bytearray) -> None:
        phoff, phentsize, phnum = struct.unpack_from("<Q", elf, 32)[0], *struct.unpack_from("<HH", elf, 54)
        for k in range(phnum):
            at = phoff + k * phentsize
            if struct.unpack_from("<I", elf, at)[0] == 1:  # PT_LOAD
                struct.pack_into("<Q", elf, at + 32, len(elf) * 4)  # p_filesz
                return

    path = _write_sealed(tmp_path / "grown.so", _resealed(exported[1], grow_first_load))
    with pytest.raises(ArtifactError, match="past the end"):
        tessera.load_module(path)


def test_edited_payload_with_a_fresh_trailer_fails_the_embedded_checksum(exported, tmp_path):
    _, data = exported

    def edit_graph(elf: bytearray) -> None:
        at = elf.index(b'"pool_size"')
        elf[at + 1:at + 5] = b"POOL"

    path = _write_sealed(tmp_path / "edited.so", _resealed(data, edit_graph))
    with pytest.raises(ArtifactError, match="do not match their checksum"):
        tessera.load_module(path)


def _export_with_graph(tmp_path: Path, graph_json: str) -> Path:
    lib = build_dense(0)
    lib.graph_json = graph_json
    return lib.export_library(tmp_path / "graph.so")


def _graph_edit(edit) -> str:
    doc = json.loads(build_dense(0).graph_json)
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("make_graph, message", [
    (lambda: "{not json", r"\(graph JSON\): not valid JSON"),
    (lambda: "[1, 2]", "top level: got list, expected an object"),
    (lambda: _graph_edit(lambda d: d.pop("entries")), "missing field 'entries'"),
    (lambda: _graph_edit(lambda d: d["nodes"][2].__setitem__("inputs", [[7, 0]])), r"nodes\[2\].inputs\[0\]"),
    (lambda: _graph_edit(lambda d: d["entries"][2].__setitem__("offset", 10**9)), r"entries\[2\].offset"),
    (lambda: _graph_edit(lambda d: d["entries"][2].__setitem__("storage_id", [1])), r"entries\[2\].storage_id"),
    (lambda: _graph_edit(lambda d: d.__setitem__("pool_size", 10**12)), "pool_size: got 1000000000000, more than"),
    (lambda: _graph_edit(lambda d: d["entries"][0].__setitem__("dtype", "object")), "got dtype 'object'"),
    (lambda: _graph_edit(lambda d: d.__setitem__("node_row_ptr", [0, 1])), "node_row_ptr: got 2 items"),
    (lambda: _graph_edit(lambda d: d["nodes"][2].__setitem__("func", "no_such_kernel")), "calls no_such_kernel"),
])
def test_corrupt_graph_json_is_refused(tmp_path, make_graph, message):
    path = _export_with_graph(tmp_path, make_graph())
    with pytest.raises(ArtifactError, match=message):
        tessera.load_module(path)


def test_parameter_missing_from_the_blob_is_refused(tmp_path):
    lib = build_dense(0)
    lib.params = {}
    path = lib.export_library(tmp_path / "noparams.so")
    with pytest.raises(ArtifactError, match=r"parameter '\w+' of the graph is missing from the parameters"):
        tessera.load_module(path)


def test_corrupt_params_blob_in_a_library_is_refused(tmp_path, monkeypatch):
    real = save_params
    monkeypatch.setattr(export_module, "save_params", lambda params: real(params)[:-5])
    path = build_dense(0).export_library(tmp_path / "cut_params.so")
    with pytest.raises(ArtifactError, match=r"cut_params.so \(parameters\): truncated"):
        tessera.load_module(path)


def _blob() -> bytes:
    return save_params({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], np.int64)})


def _set_dtype(blob: bytes, old: bytes, new: bytes) -> bytes:
    return blob.replace(struct.pack("<I", len(old)) + old, struct.pack("<I", len(new)) + new, 1)


@pytest.mark.parametrize("make_blob, message", [
    (lambda: b"", "bad magic|got magic"),
    (lambda: b"NOTPARAM" + bytes(8), "got magic b'NOTPARAM'"),
    (lambda: _blob()[:9], "truncated"),
    (lambda: _blob()[:-1], "truncated"),
    (lambda: _blob() + b"\0", "unexpected bytes after the last array"),
    (lambda: _set_dtype(_blob(), b"float32", b"object\0"), "got dtype 'object\\\\x00'"),
    (lambda: _set_dtype(_blob(), b"float32", b"xfloat32"), "got dtype 'xfloat32'"),
    (lambda: _blob().replace(b"\x01\x00\x00\x00b", b"\x01\x00\x00\x00\xff", 1), "not UTF-8"),
    (lambda: _blob().replace(struct.pack("<Q", 24), struct.pack("<Q", 25), 1), "got 25 data bytes, expected 24"),
    (lambda: save_params({"e": np.zeros((0, 3, 3), np.uint8)}).replace(
        struct.pack("<3q", 0, 3, 3), struct.pack("<3q", 2**40, 0, 2**40)), r"shape \(1099511627776, 0, .* impossible"),
])
def test_corrupt_params_blob_is_refused(make_blob, message):
    for cut in range(0, len(_blob())):  # every prefix fails cleanly too
        with pytest.raises(ArtifactError):
            load_params(_blob()[:cut], "blob")
    with pytest.raises(ArtifactError, match=message):
        load_params(make_blob(), "params.bin")


def test_bare_file_name_loads_that_file_not_a_system_library(exported, tmp_path, monkeypatch):
    """ctypes looks a name without a slash up on the system library path: 'libm.so.6' was libm."""
    shutil.copyfile(exported[0], tmp_path / "libm.so.6")
    monkeypatch.chdir(tmp_path)
    np.testing.assert_array_equal(tessera.load_module("libm.so.6")(X)[0], build_dense(0)(X)[0])


def test_reexport_to_the_same_path_loads_the_new_library(tmp_path):
    """The dynamic loader hands back a library already loaded under the same path; loading must not."""
    path = tmp_path / "model.so"
    build_dense(0).export_library(path)
    first = tessera.load_module(path)(X)[0]
    build_dense(1).export_library(path)
    second = tessera.load_module(path)(X)[0]
    np.testing.assert_array_equal(second, build_dense(1)(X)[0])
    assert not np.array_equal(first, second)
