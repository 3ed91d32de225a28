"""The PyTorch-exported model suites shipped in the onnx wheel.

`onnx/backend/test/data/pytorch-converted/*` and `pytorch-operator/*`: each
case is a directory with model.onnx and test_data_set_*/{input,output}_N.pb.
Every case runs; the ones tessera cannot pass yet are listed in
KNOWN_FAILURES (strict xfail, so a fix shows up as an unexpected pass).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tessera.frontend.onnx.backend import TesseraBackend

from .harness import assert_outputs_match

DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data"
SUITES = ("pytorch-converted", "pytorch-operator")

# onnx's defaults for these suites
RTOL, ATOL = 1e-3, 1e-7

# case name -> reason; every entry must be a real, current failure.
KNOWN_FAILURES: dict[str, str] = {}


def _load_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _data_sets(case_dir: Path) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    sets = []
    for d in sorted(case_dir.glob("test_data_set_*")):
        inputs = [_load_tensor(p) for p in sorted(d.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        outputs = [_load_tensor(p) for p in sorted(d.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        sets.append((inputs, outputs))
    return sets


def _cases():
    for suite in SUITES:
        for case_dir in sorted((DATA_DIR / suite).iterdir()):
            if not (case_dir / "model.onnx").is_file():
                continue
            marks = []
            if case_dir.name in KNOWN_FAILURES:
                marks.append(pytest.mark.xfail(reason=KNOWN_FAILURES[case_dir.name], strict=True))
            yield pytest.param(suite, case_dir, id=f"{suite}/{case_dir.name}", marks=marks)


ALL_CASES = list(_cases())


def test_suites_are_present():
    counts = {s: sum(1 for p in ALL_CASES if p.values[0] == s) for s in SUITES}
    assert counts == {"pytorch-converted": 82, "pytorch-operator": 35}, counts


def test_known_failures_are_cases():
    names = {p.values[1].name for p in ALL_CASES}
    assert not set(KNOWN_FAILURES) - names, f"stale entries: {sorted(set(KNOWN_FAILURES) - names)}"


@pytest.mark.parametrize("suite, case_dir", ALL_CASES)
def test_pytorch_case(suite: str, case_dir: Path, record_property) -> None:
    record_property("suite", suite)
    model = onnx.load(str(case_dir / "model.onnx"))
    rep = TesseraBackend.prepare(model)
    data_sets = _data_sets(case_dir)
    assert data_sets, f"{case_dir} has no test data"
    for inputs, outputs in data_sets:
        actual = rep.run(inputs)
        assert_outputs_match(outputs, list(actual), RTOL, ATOL)
