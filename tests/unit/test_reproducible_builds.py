"""Byte-identical rebuilds (issue 14, item 8).

Two clean builds of one model, each with its own fresh cache folder and
output folder, give the same bytes: the shared library (where a random
temporary path used to reach a symbol name) and the Model Library Format
tarball and folder.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

import tessera
from tessera.frontend import from_onnx

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"


def _clean_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: str, executor: str, name: str) -> Path:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / run / "cache"))
    mod, params = from_onnx(str(DIGITS))
    lib = tessera.build(mod, params=params, executor=executor, **({"mod_name": "digits"} if executor == "aot" else {}))
    return lib.export_library(tmp_path / run / "out" / name)


def test_shared_library_is_byte_identical_across_clean_builds(tmp_path, monkeypatch):
    first = _clean_build(tmp_path, monkeypatch, "one", "graph", "digits.so")
    second = _clean_build(tmp_path, monkeypatch, "two", "graph", "digits.so")
    data = first.read_bytes()
    assert data == second.read_bytes()
    for path_piece in (str(tmp_path).encode(), b"tessera-build-", b"tessera-export-", b"/tmp/"):
        assert path_piece not in data, f"{path_piece!r} reached the library"


def test_model_library_format_is_byte_identical_across_clean_builds(tmp_path, monkeypatch):
    first = _clean_build(tmp_path, monkeypatch, "one", "aot", "digits.tar")
    second = _clean_build(tmp_path, monkeypatch, "two", "aot", "digits.tar")
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members if m.name != "SHA256SUMS") + ["SHA256SUMS"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}
    folders = [_clean_build(tmp_path, monkeypatch, run, "aot", "mlf") for run in ("three", "four")]
    contents = [{p.relative_to(f): p.read_bytes() for p in f.rglob("*") if p.is_file()} for f in folders]
    assert contents[0] == contents[1] and Path("SHA256SUMS") in contents[0]
