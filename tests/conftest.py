"""Test configuration.

Generated C must compile warning-free (TESSERA_WERROR), and tests that tag
themselves with a "suite" property are counted per suite: the counts are
printed at the end of the run ("ONNX conformance" section). The hooks live
here, in the top-level conftest, so pytest-xdist's controller runs them too.
"""

from __future__ import annotations

import os

from conformance.results import record, summary_lines

os.environ.setdefault("TESSERA_WERROR", "1")


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
