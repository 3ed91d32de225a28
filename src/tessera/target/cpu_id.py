"""Which CPU this machine has, as one string: the key under which tuning logs keep their timings.

Kernel timings depend on the CPU's model (caches, ports) and on which vector
instructions it runs, so a measurement is kept with `cpu_key()`: the model
name /proc/cpuinfo reports and the highest x86-64 ISA level its flags reach
(a virtual machine may report a model name but hide AVX-512). Other
architectures give the machine name (e.g. aarch64) in place of the level.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

from .simd import X86_64_LEVELS, native_cpu_flags

# /proc/cpuinfo fields naming the model, most specific first (x86, then Arm and others)
_MODEL_FIELDS = ("model name", "Model", "Hardware", "cpu model")


def isa_level(flags: frozenset[str]) -> str:
    """The highest x86-64 ISA level (`x86-64`, `x86-64-v2`, ...) whose flags are all in `flags`, "" for none."""
    reached = [level for level, needs in X86_64_LEVELS.items() if needs <= flags]
    return reached[-1] if reached else ""


def cpu_model(cpuinfo: str) -> str:
    """The CPU's model name in /proc/cpuinfo text, "" if it names none."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(name.strip(), " ".join(value.split()))
    return next((fields[f] for f in _MODEL_FIELDS if f in fields), "")


def describe_cpu(model: str, level: str) -> str:
    """The key of a CPU: `model (level)`, e.g. `AMD EPYC 9R14 (x86-64-v4)`."""
    return f"{model or 'unknown CPU'} ({level or 'unknown ISA level'})"


@functools.lru_cache(maxsize=1)
def native_cpu_model() -> str:
    """This machine's CPU model name from /proc/cpuinfo (else what `platform` says, possibly "")."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    return cpu_model(info) or platform.processor()


@functools.lru_cache(maxsize=1)
def cpu_key() -> str:
    """This machine's CPU, as tuning logs record it (see the module doc)."""
    return describe_cpu(native_cpu_model(), isa_level(native_cpu_flags()) or platform.machine())
