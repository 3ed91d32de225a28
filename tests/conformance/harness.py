"""Shared checks for the ONNX conformance tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.txt")


def expected_failures() -> dict[str, str]:
    """Test name -> reason, from expected_failures.txt ("name  # reason")."""
    result: dict[str, str] = {}
    for line in EXPECTED_FAILURES_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        if not reason.strip():
            raise ValueError(f"expected failure {name.strip()!r} has no reason")
        result[name.strip()] = reason.strip()
    return result


def assert_outputs_match(expected: list[np.ndarray], actual: list[np.ndarray], rtol: float, atol: float) -> None:
    assert len(actual) == len(expected), f"got {len(actual)} outputs, expected {len(expected)}"
    for k, (ref, out) in enumerate(zip(expected, actual)):
        ref, out = np.asarray(ref), np.asarray(out)
        assert out.dtype == ref.dtype, f"output {k}: dtype {out.dtype}, expected {ref.dtype}"
        assert out.shape == ref.shape, f"output {k}: shape {out.shape}, expected {ref.shape}"
        if ref.dtype.name == "bfloat16":
            # as ONNX's own backend test runner compares them: in float32, within two bfloat16 ulps
            np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=max(rtol, 2.0 ** -6),
                                       atol=atol, equal_nan=True, err_msg=f"output {k}")
        elif ref.dtype.kind in "fc":
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(out, ref, err_msg=f"output {k}")
