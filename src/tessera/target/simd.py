"""How many float32 lanes a target's vector registers hold: schedules size their register tiles by it.

Read from the target's `-march`/`-mattr` (and, for `-march=native`, from the
CPU flags of this machine). None when unknown: schedules then keep their
own defaults.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .target import Target

# -march values by widest float vector (gcc names; prefixes cover families)
_AVX512_ARCHES = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake", "tigerlake",
                  "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5",
                  "x86-64-v4")
_AVX2_ARCHES = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "znver1", "znver2",
                "znver3", "x86-64-v3")


@functools.lru_cache(maxsize=1)
def native_cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    return frozenset(line.split(":", 1)[-1].split())


def _lanes_of_features(features: set[str] | frozenset[str]) -> int | None:
    if "avx512f" in features:
        return 16
    if "avx2" in features or "avx" in features:
        return 8
    if {"sse2", "neon", "asimd"} & set(features):
        return 4
    return None


def float32_lanes(target: Target) -> int | None:
    """float32 lanes per vector register for `target`'s C code, None if unknown (e.g. Cortex-M)."""
    if str(target.get("mcpu", "")).startswith("cortex-m"):
        return None
    lanes = _lanes_of_features({a.removeprefix("-m") for a in target.get("mattr", ())})
    march = target.get("march") or "native"
    if march == "native":
        native = _lanes_of_features(native_cpu_flags())
        return max(filter(None, (lanes, native)), default=None)
    if march.startswith(_AVX512_ARCHES):
        return 16
    if march.startswith(_AVX2_ARCHES):
        return max(lanes or 0, 8)
    return lanes
