"""The `composite` kind, and the C toolchain of the `c` kind.

The `c` kind itself is registered next to its code generator
(`tessera.codegen.c_target`). Its toolchain picks the compiler from the
target's attributes: no `-mcpu`, or a
host CPU name or x86-64 ISA level (`-mcpu=x86-64-v3`), means gcc for this
kind of machine (`-O3 -march=native`, or that CPU or level); a
`cortex-m*` CPU means arm-none-eabi-gcc with that core's Thumb and
floating-point flags.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from ..crt import INCLUDE_DIR
from .errors import TargetError
from .simd import host_arch
from .kind import OptionType, TargetKind
from .target import Target
from .toolchain import Toolchain


@dataclass(frozen=True)
class CortexM:
    """What gcc needs to know about a Cortex-M core."""

    fpu: str | None  # -mfpu for hard float, None when the core has no FPU
    dsp: bool = False


CORTEX_M: dict[str, CortexM] = {
    "cortex-m0": CortexM(None),
    "cortex-m0plus": CortexM(None),
    "cortex-m3": CortexM(None),
    "cortex-m4": CortexM("fpv4-sp-d16", dsp=True),
    "cortex-m7": CortexM("fpv5-d16", dsp=True),
    "cortex-m33": CortexM("fpv5-sp-d16", dsp=True),
    "cortex-m55": CortexM("auto", dsp=True),
}

# OpenMP runs the kernels' parallel loops. -fno-trapping-math: kernels never read floating-point
# exception flags, and without it gcc vectorises no loop whose select arm computes (LeakyRelu's
# x * alpha, HardSwish's x * clamp(...)) for AVX2 and older: it moves that arithmetic into a branch,
# then will not execute it unconditionally. -fno-math-errno: kernels never read errno either, and
# with it gcc must call sqrtf (which sets errno for a negative input) at every use, inside the
# innermost loop: LayerNorm's 1 / sqrtf(variance + eps) ran once per element, not once per row, and
# took 1.0 ms of ConvNeXt-T's block. Values are unchanged (NaN, infinities, signed zeros).
HOST_CFLAGS = ("-O3", "-std=gnu11", "-fopenmp", "-fno-trapping-math", "-fno-math-errno")


def is_micro(target: Target) -> bool:
    return str(target.get("mcpu", "")).startswith("cortex-m")


def _float_abi(target: Target, core: CortexM) -> str:
    abi = target.get("mfloat-abi")
    if abi is None:
        return "hard" if core.fpu else "soft"
    if abi != "soft" and core.fpu is None:
        raise TargetError(
            f"target {target}: {target['mcpu']} has no FPU, so -mfloat-abi={abi} is impossible; valid: soft"
        )
    return abi


def validate_c(target: Target) -> None:
    """Reject impossible CPU/float combinations when the target is built."""
    mcpu = target.get("mcpu")
    if mcpu is not None and mcpu.startswith("cortex-m"):
        core = CORTEX_M.get(mcpu)
        if core is None:
            raise TargetError(f"target {target}: unknown Cortex-M core {mcpu!r}; known: {', '.join(CORTEX_M)}")
        _float_abi(target, core)


def c_toolchain(target: Target) -> Toolchain:
    """gcc for the host, or arm-none-eabi-gcc for a Cortex-M `-mcpu`."""
    mcpu = target.get("mcpu")
    extra = tuple(f"-m{attr}" if not attr.startswith("-") else attr for attr in target.get("mattr", ()))
    if mcpu is not None and mcpu.startswith("cortex-m"):
        core = CORTEX_M.get(mcpu)
        if core is None:
            raise TargetError(
                f"target {target}: unknown Cortex-M core {mcpu!r}; known: {', '.join(CORTEX_M)}"
            )
        abi = _float_abi(target, core)
        flags = [f"-mcpu={mcpu}", "-mthumb", f"-mfloat-abi={abi}"]
        fpu = target.get("mfpu") or core.fpu
        if abi != "soft" and fpu:
            flags.append(f"-mfpu={fpu}")
        # -O3: its unrolling and vectorisation cut MLPerf Tiny's instruction counts on Cortex-M4 by
        # 4-38% (int8 kws 38%), for 1-8% more flash (benchmarks/mcu.py)
        return Toolchain(
            cc=target.get("cc", "arm-none-eabi-gcc"),
            cflags=("-O3", "-std=gnu11", *flags, *extra, "-ffunction-sections", "-fdata-sections"),
            warning_flags=("-Wall",),
            ldflags=("-lm",),
            include_dirs=(INCLUDE_DIR,),
            runtime_sources=(),
            pic=False,
        )
    # gcc takes x86 CPU names and ISA levels only as -march; on other hosts -mcpu names a CPU
    on_x86 = platform.machine() in ("x86_64", "AMD64")
    arch = f"-march={host_arch(target)}" if on_x86 or mcpu in (None, "native") or target.get("march") \
        else f"-mcpu={mcpu}"
    return Toolchain(
        cc=target.get("cc", "gcc"),
        cflags=(*HOST_CFLAGS, arch, *extra),
        include_dirs=(INCLUDE_DIR,),
        runtime_sources=("workspace_heap.c", "threads.c", "cpu_features.c"),
    )


def validate_composite(target: Target) -> None:
    host = target.get("host")
    if host is None:
        raise TargetError("a composite target needs a host, e.g. 'composite -host=c -accelerators=...'")
    if host.kind.accelerator or host.kind.name == "composite":
        raise TargetError(f"composite host must be a host target such as 'c', got {host.kind.name!r}")


COMPOSITE_KIND = (
    TargetKind.register("composite", device="cpu", doc="a host target plus an ordered list of accelerators")
    .add_attr_option("host", OptionType.TARGET, default=None, doc="the target that runs the graph")
    .add_attr_option("accelerators", OptionType.TARGET_LIST, default=(), doc="accelerators, in partition order")
    .set_validate(validate_composite)
)
