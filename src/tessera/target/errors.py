"""TargetError: every mistake in a target description."""

from __future__ import annotations

from ..errors import TesseraError


class TargetError(TesseraError):
    """An unknown kind or attribute, a badly typed value, a malformed string,
    a misused accelerator or a wrongly typed hook."""
