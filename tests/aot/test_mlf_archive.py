"""Model Library Format archives are read back with every check (issue 14, item 6).

A non-tar, truncated or incomplete archive, a damaged member, garbage
metadata.json, and members that could escape the unpacking folder (`..`,
absolute paths, links, devices) all give an `ArtifactError` naming the
archive and the problem; nothing is written outside the destination.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.backend.aot.mlf_archive import MANIFEST, with_manifest, write_tar
from tessera.backend.aot.runner import MlfModel
from tessera.cli import main as cli
from tessera.errors import ArtifactError
from tessera.frontend import from_onnx


def _model():
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    """The files of a small AOT export, SHA256SUMS excluded."""
    mod, params = from_onnx(_model())
    return tessera.build(mod, params=params, executor="aot", mod_name="tiny").files()


@pytest.fixture(scope="module")
def good_tar(files, tmp_path_factory) -> Path:
    return write_tar(with_manifest(files), tmp_path_factory.mktemp("mlf") / "tiny.tar")


def _tar(path: Path, members: list[tarfile.TarInfo], contents: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info in members:
            data = contents.get(info.name)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_good_archive_unpacks_with_its_manifest(good_tar):
    model = MlfModel(good_tar)
    assert model.signature.name == "tiny" and (model.folder / MANIFEST).is_file()
    assert model.metadata["inputs"][0]["shape"] == [1, 8]


@pytest.mark.parametrize("content, message", [
    (b"", "is empty"),
    (os.urandom(4096), "is not a tar archive"),
    (b"\x7fELF" + bytes(2000), "is not a tar archive"),
])
def test_files_that_are_not_tarballs_are_refused(tmp_path, content, message):
    path = tmp_path / "model.tar"
    path.write_bytes(content)
    with pytest.raises(ArtifactError, match=message):
        MlfModel(path)


def test_truncated_archives_are_refused(good_tar, tmp_path):
    data = good_tar.read_bytes()
    with tarfile.open(good_tar) as tar:
        manifest_data = tar.getmember(MANIFEST).offset_data  # the last member: cut its data off
    for n in (700, 1024, 5000, len(data) // 2, len(data) // 2 // 512 * 512, manifest_data, len(data) - 1):
        path = tmp_path / f"cut{n}.tar"
        path.write_bytes(data[:n])
        with pytest.raises(ArtifactError, match="truncated|cut short|damaged tar|missing|no SHA256SUMS") as err:
            MlfModel(path)
        assert str(path) in str(err.value)


def test_missing_member_is_refused(files, tmp_path):
    listed = with_manifest(files)
    victim = next(n for n in listed if n.endswith("_executor.c"))
    path = write_tar({k: v for k, v in listed.items() if k != victim}, tmp_path / "incomplete.tar")
    with pytest.raises(ArtifactError, match=f"missing {victim} \\(listed in SHA256SUMS\\)"):
        MlfModel(path)


def test_member_not_in_the_manifest_is_refused(files, tmp_path):
    path = write_tar({**with_manifest(files), "codegen/host/src/extra.c": b"int x;\n"}, tmp_path / "extra.tar")
    with pytest.raises(ArtifactError, match="extra.c not listed in SHA256SUMS"):
        MlfModel(path)


def test_damaged_member_fails_its_checksum(files, tmp_path):
    listed = with_manifest(files)
    name = next(n for n in listed if n.endswith("_params.bin"))
    damaged = bytearray(listed[name])
    damaged[len(damaged) // 2] ^= 1
    path = write_tar({**listed, name: bytes(damaged)}, tmp_path / "damaged.tar")
    with pytest.raises(ArtifactError, match=f"{name} does not match its checksum"):
        MlfModel(path)


def test_file_and_folder_of_one_name_is_refused(files, tmp_path):
    name = next(n for n in files if n.endswith("_executor.c"))
    path = write_tar(with_manifest({**files, f"{name}/inner.c": b"int y;\n"}), tmp_path / "clash.tar")
    with pytest.raises(ArtifactError, match="cannot unpack"):
        MlfModel(path)


def test_archive_without_manifest_is_refused(files, tmp_path):
    path = write_tar(dict(files), tmp_path / "old.tar")
    with pytest.raises(ArtifactError, match="has no SHA256SUMS"):
        MlfModel(path)


@pytest.mark.parametrize("metadata, message", [
    (None, "has no metadata.json"),
    (b"\xff\xfe", "metadata.json: not UTF-8"),
    (b"{garbage", "metadata.json: not valid JSON"),
    (b"[]", "got a JSON list, expected an object"),
    (json.dumps({"model_name": "tiny", "outputs": []}).encode(), "expected 'inputs': a list"),
    (json.dumps({"model_name": "tiny", "inputs": [{"name": "x", "shape": [-1], "dtype": "float32"}],
                 "outputs": []}).encode(), r"inputs\[0\].shape"),
    (json.dumps({"model_name": "tiny", "inputs": [{"name": "x", "shape": [1], "dtype": "cfloat"}],
                 "outputs": []}).encode(), r"inputs\[0\].dtype: got 'cfloat'"),
    (json.dumps({"model_name": "tiny", "inputs": [], "outputs": [],
                 "toolchain": {"link_flags": "-lm"}}).encode(), "toolchain.link_flags"),
])
def test_bad_metadata_is_refused(files, tmp_path, metadata, message):
    contents = {k: v for k, v in files.items() if k != "metadata.json"}
    if metadata is not None:
        contents["metadata.json"] = metadata
    path = write_tar(with_manifest(contents), tmp_path / "meta.tar")
    with pytest.raises(ArtifactError, match=message):
        MlfModel(path)


def _escaping_members() -> list[tuple[str, list[tarfile.TarInfo], dict[str, bytes]]]:
    cases = []
    for name in ("../escaped.txt", "/tmp/escaped-abs.txt", "codegen/../../escaped.txt"):
        info, data = _file(name, b"pwned\n")
        cases.append((name, [info], {name: data}))
    link = tarfile.TarInfo("codegen/host/src/link.c")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    cases.append(("symlink", [link], {}))
    hard = tarfile.TarInfo("codegen/host/src/hard.c")
    hard.type, hard.linkname = tarfile.LNKTYPE, "metadata.json"
    cases.append(("hardlink", [hard], {}))
    dev = tarfile.TarInfo("dev")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
    cases.append(("device", [dev], {}))
    return cases


@pytest.mark.parametrize("case", range(6))
def test_members_that_could_escape_are_refused(files, tmp_path, case):
    label, extra, contents = _escaping_members()[case]
    listed = with_manifest(files)
    members = [_file(name, data)[0] for name, data in sorted(listed.items())]
    path = _tar(tmp_path / "evil.tar", [*extra, *members], {**listed, **contents})
    with pytest.raises(ArtifactError, match="unsafe path|link or special file"):
        MlfModel(path)
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/escaped-abs.txt").exists(), label


def test_folder_with_a_linked_or_edited_file_is_refused(tmp_path):
    mod, params = from_onnx(_model())
    folder = tessera.build(mod, params=params, executor="aot", mod_name="tiny").export_library(tmp_path / "mlf")
    (folder / "a.out").write_bytes(b"the user's own build")  # files not in SHA256SUMS are left out
    assert MlfModel(folder).signature.name == "tiny"
    source = next((folder / "codegen/host/src").glob("*_executor.c"))
    text = source.read_text()
    source.write_text(text + "\n/* edited */\n")
    with pytest.raises(ArtifactError, match="does not match its checksum in SHA256SUMS"):
        MlfModel(folder)
    source.unlink()
    source.symlink_to("/etc/passwd")
    with pytest.raises(ArtifactError, match="_executor.c is a link or special file"):
        MlfModel(folder)
    source.unlink()
    with pytest.raises(ArtifactError, match=r"missing codegen/host/src/\w*_executor.c \(listed in SHA256SUMS\)"):
        MlfModel(folder)


def test_cli_run_of_a_bad_archive_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "model.tar"
    path.write_bytes(b"not a tar at all" * 64)
    assert cli(["run", str(path), "--random-input", "-q"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "is not a tar archive" in err
