"""The C runtime (CRT) shipped with generated code: headers and sources."""

from __future__ import annotations

from pathlib import Path

CRT_ROOT = Path(__file__).resolve().parent
INCLUDE_DIR = CRT_ROOT / "include"
SOURCE_DIR = CRT_ROOT / "src"


def source(name: str) -> Path:
    path = SOURCE_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"CRT source {name!r} not found in {SOURCE_DIR}")
    return path
