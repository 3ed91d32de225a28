"""Tests of generated code for an x86-64 level: skip the run where this CPU cannot execute that code.

A test may always build C for any level (`c -mcpu=x86-64-v3`, `-v4`) and read
it; only running it needs the level's instructions. CI runs on whichever
machine a session gets (AVX2-only AMD, AVX-512 Intel or AMD), so such tests
call `require_level` before they run anything.
"""

from __future__ import annotations

import platform

from ..target.simd import missing_level_features


def require_level(level: str) -> None:
    """Skip the calling test unless this machine can run `level` code (x86-64-v2, -v3 or -v4)."""
    import pytest  # (a test helper: pytest is there whenever it is called)

    if platform.machine() != "x86_64":
        pytest.skip("x86-64 ISA levels need an x86-64 host")
    missing = missing_level_features(level)
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))}, so {level} code cannot run here")
