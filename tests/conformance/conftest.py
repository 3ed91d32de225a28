"""Collects per-suite counts (tests tag themselves with a "suite" property)."""

from __future__ import annotations

from .results import record, summary_lines


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
        terminalreporter.section("ONNX conformance")
        for line in lines:
            terminalreporter.write_line(line)
