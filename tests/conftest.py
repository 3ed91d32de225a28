"""Test configuration: generated C must compile warning-free."""

from __future__ import annotations

import os

os.environ.setdefault("TESSERA_WERROR", "1")
