"""Short excerpts of printed IR for error messages.

A verifier that finds a bad node prints the function with a marker on the
node's line; the error then shows only the lines around the marker (a whole
model's graph is thousands of lines), each cut to a readable width.
"""

from __future__ import annotations

from collections.abc import Sequence

MARKER = "<<<"  # what verifiers append to the offending line


def shorten(line: str, width: int = 120) -> str:
    """`line` cut to `width` characters, the cut shown by '...'."""
    return line if len(line) <= width else line[: width - 3] + "..."


def excerpt(lines: Sequence[str], index: int, context: int = 4, width: int = 120) -> str:
    """Lines `index - context` to `index + context` of `lines`, each prefixed by its
    number; the line at `index` is flagged with '>'. Elisions are shown as '...'."""
    lo, hi = max(0, index - context), min(len(lines), index + context + 1)
    digits = len(str(hi))
    out = ["   ..."] if lo > 0 else []
    for k in range(lo, hi):
        flag = ">" if k == index else " "
        out.append(shorten(f"{flag} {k + 1:>{digits}} | {lines[k]}", width))
    if hi < len(lines):
        out.append("   ...")
    return "\n".join(out)


def excerpt_at_marker(text: str, marker: str = MARKER, context: int = 4, width: int = 120) -> str:
    """The excerpt around the first line of `text` that contains `marker`
    (the first lines of `text` when none does)."""
    lines = text.splitlines()
    index = next((k for k, line in enumerate(lines) if marker in line), 0)
    return excerpt(lines, index, context, width)
