"""docs/adding-a-target.md states the line counts of the contrib modules: keep them true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_line_counts_in_the_guide_match_the_files():
    guide = (ROOT / "docs" / "adding-a-target.md").read_text()
    rows = re.findall(r"\| `(src/tessera/contrib/\w+\.py)` \| (\d+) \|", guide)
    assert len(rows) == 2
    for path, count in rows:
        actual = len((ROOT / path).read_text().splitlines())
        assert int(count) == actual, f"{path} has {actual} lines, the guide says {count}"
