"""The examples in docs/ run as written."""

from __future__ import annotations

import re
from pathlib import Path

from tessera.target import KINDS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_target_kind_example_runs_and_is_short(capsys):
    (example,) = _python_blocks(DOCS / "target-kinds.md")
    assert len(example.strip().splitlines()) < 60
    try:
        exec(compile(example, "docs/target-kinds.md", "exec"), {})
        assert "[1. 1. 1. 1.]" in capsys.readouterr().out
    finally:
        if "cfast" in KINDS:
            KINDS.remove("cfast")
