"""How many float32 lanes a target's vector registers hold: schedules size their register tiles by it.

Read from the target's `-march`, `-mcpu` (an x86-64 CPU or ISA level such as
`x86-64-v3`) and `-mattr` (and, for `native`, from the CPU flags of this
machine). None when unknown: schedules then keep their own defaults.
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

# The x86-64 micro-architecture levels (psABI), by the /proc/cpuinfo flags each adds.
X86_64_LEVELS: dict[str, frozenset[str]] = {
    "x86-64": frozenset({"sse", "sse2"}),
    "x86-64-v2": frozenset({"sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16"}),
    "x86-64-v3": frozenset({"sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "avx", "avx2",
                            "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"}),
    "x86-64-v4": frozenset({"sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "avx", "avx2",
                            "fma", "bmi1", "bmi2", "f16c", "movbe", "abm", "avx512f", "avx512bw", "avx512cd",
                            "avx512dq", "avx512vl"}),
}


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


def missing_level_features(level: str) -> frozenset[str]:
    """The CPU flags of x86-64 ISA `level` that this machine lacks (empty: it can run such code)."""
    return X86_64_LEVELS[level] - native_cpu_flags()


def host_arch(target: Target) -> str | None:
    """The gcc -march a host `c` target compiles for: `-march`, else a host `-mcpu`, else native.

    None for a Cortex-M target. gcc takes x86 CPU names and ISA levels only as
    -march (its x86 -mcpu is a deprecated -mtune), so `c -mcpu=x86-64-v3`
    means -march=x86-64-v3.
    """
    mcpu = target.get("mcpu")
    if mcpu is not None and str(mcpu).startswith("cortex-m"):
        return None
    return target.get("march") or mcpu or "native"


def float32_lanes(target: Target) -> int | None:
    """float32 lanes per vector register for `target`'s C code, None if unknown (e.g. Cortex-M)."""
    march = host_arch(target)
    if march is None:
        return None
    lanes = _lanes_of_features({a.removeprefix("-m") for a in target.get("mattr", ())})
    if march == "native":
        native = _lanes_of_features(native_cpu_flags())
        return max(filter(None, (lanes, native)), default=None)
    if march in X86_64_LEVELS:
        return max(lanes or 0, _lanes_of_features(X86_64_LEVELS[march]) or 0)
    if march.startswith(_AVX512_ARCHES):
        return 16
    if march.startswith(_AVX2_ARCHES):
        return max(lanes or 0, 8)
    return lanes
