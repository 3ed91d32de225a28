"""Per-suite pass/fail counts, printed at the end of the pytest run."""

from __future__ import annotations

from collections import defaultdict

COUNTS: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "expected": 0})


def record(suite: str, outcome: str) -> None:
    COUNTS[suite][outcome] += 1


def summary_lines() -> list[str]:
    lines = []
    for suite, c in sorted(COUNTS.items()):
        line = f"{suite}: {c['passed']} passed, {c['failed'] + c['expected']} failed"
        if c["expected"]:
            line += f" ({c['expected']} of them listed as expected failures)"
        lines.append(line)
    return lines
