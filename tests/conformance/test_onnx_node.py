"""ONNX node conformance: every node test case whose operators tessera
claims to support must pass, except those in expected_failures.txt."""

from __future__ import annotations

import warnings

import onnx
import pytest

from tessera.frontend.onnx.backend import TesseraBackend, claimed_op_types, graph_op_types

from .harness import assert_outputs_match, expected_failures


def _collect():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases(None)


ALL_CASES = _collect()
CLAIMED = claimed_op_types()
XFAIL = expected_failures()
IN_SCOPE = [c for c in ALL_CASES if graph_op_types(c.model.graph) <= CLAIMED]


def _params():
    for case in IN_SCOPE:
        marks = []
        if case.name in XFAIL:
            marks.append(pytest.mark.xfail(reason=XFAIL[case.name], strict=True))
        yield pytest.param(case, id=case.name, marks=marks)


def test_expected_failures_are_in_scope():
    """A stale entry in expected_failures.txt would hide nothing: flag it."""
    names = {c.name for c in IN_SCOPE}
    stale = sorted(n for n in XFAIL if n.startswith("test_") and n not in names
                   and n in {c.name for c in ALL_CASES})
    assert not stale, f"expected failures for cases out of scope: {stale}"


@pytest.mark.parametrize("case", list(_params()))
def test_node(case, record_property):
    record_property("suite", "onnx node tests (claimed operators)")
    rep = TesseraBackend.prepare(case.model)
    for inputs, outputs in case.data_sets:
        inputs = [onnx.numpy_helper.to_array(i) if isinstance(i, onnx.TensorProto) else i for i in inputs]
        outputs = [onnx.numpy_helper.to_array(o) if isinstance(o, onnx.TensorProto) else o for o in outputs]
        actual = rep.run(inputs)
        assert_outputs_match(outputs, list(actual), case.rtol, case.atol)
