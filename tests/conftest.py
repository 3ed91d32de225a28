"""Test configuration.

Generated C must compile warning-free (TESSERA_WERROR), and tests that tag
themselves with a "suite" property are counted per suite: the counts are
printed at the end of the run ("ONNX conformance" section). The hooks live
here, in the top-level conftest, so pytest-xdist's controller runs them too.

Every test runs inside `PassContext(config={"verify": True})`: the Relay and
TIR verifiers check the IR after every pass, and contexts a test creates
inherit the setting (see docs/verifier.md).
"""

from __future__ import annotations

import os

import pytest

from conformance.results import record, summary_lines
from tessera.transform.pass_infra import PassContext

os.environ.setdefault("TESSERA_WERROR", "1")


@pytest.fixture(autouse=True)
def _verify_ir_after_every_pass():
    with PassContext(config={"verify": True}):
        yield


@pytest.fixture
def blas_beside_host_gemm(monkeypatch):
    """The `blas` target taking products even where the host has its own faster GEMM (contrib/blas.py
    HOST_GEMM_FIRST, off): for tests of offloading itself, on any x86-64 (AVX2 and AVX-512 hosts keep them)."""
    from tessera.contrib import blas

    monkeypatch.setattr(blas, "HOST_GEMM_FIRST", False)


@pytest.fixture
def blas_takes_small_gemms(monkeypatch, blas_beside_host_gemm):
    """The `blas` target with its size thresholds (contrib/blas.py MIN_MACS, measured for speed) at 0 and
    beside the host's GEMM: for tests of offloading itself on small models (the digits CNN), whose GEMMs
    stay on the host otherwise."""
    from tessera.contrib import blas

    monkeypatch.setattr(blas, "MIN_MACS", {unfolds: 0 for unfolds in blas.MIN_MACS})


def pytest_runtest_logreport(report):
    suite = dict(report.user_properties).get("suite")
    if suite is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            record(suite, "expected" if report.skipped else "passed")
        else:
            record(suite, "passed" if report.passed else "failed")


def pytest_terminal_summary(terminalreporter):
    lines = summary_lines()
    if lines:
        terminalreporter.section("conformance and model suites")
        for line in lines:
            terminalreporter.write_line(line)
