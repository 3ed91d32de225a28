"""The `c` kind's default code generator: PrimFuncs -> C translation units.

Kernels are spread over several translation units so gcc can compile them
in parallel; each unit holds about KERNELS_PER_UNIT kernels, or as many as
the current PassContext's `codegen.kernels_per_unit` says (`tessera compile
--timings` sets 1, so that each kernel's compile time is its own).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import TesseraError
from ..runtime.module import CSourceModule
from ..target.toolchain import SourceFile
from ..tir.stmt import PrimFunc
from .c_source import CodeGenC

if TYPE_CHECKING:
    from ..relay.module import IRModule
    from ..target.target import Target

# Enough kernels to amortise gcc's start-up, few enough that cores share the work.
KERNELS_PER_UNIT = 24
KERNELS_PER_UNIT_CONFIG = "codegen.kernels_per_unit"  # PassContext.config key overriding it


def kernels_per_unit() -> int:
    """How many kernels go into one translation unit in the current PassContext."""
    from ..transform.pass_infra import PassContext

    value = PassContext.current().config.get(KERNELS_PER_UNIT_CONFIG, KERNELS_PER_UNIT)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TesseraError(f"PassContext config {KERNELS_PER_UNIT_CONFIG!r}: got {value!r}, expected an integer >= 1")
    return value


def primfuncs(mod: "IRModule") -> list[PrimFunc]:
    return [f for _, f in sorted(mod.items(), key=lambda kv: kv[0].name_hint) if isinstance(f, PrimFunc)]


def build_c_module(mod: "IRModule", target: "Target", codegen_class: type[CodeGenC] = CodeGenC,
                   prefix: str = "kernels") -> CSourceModule:
    """Generate C for every PrimFunc of `mod` with `codegen_class`."""
    from ..crt import source as crt_source

    toolchain = target.kind.toolchain(target)
    kernels = primfuncs(mod)
    units = max(1, math.ceil(len(kernels) / kernels_per_unit()))
    sources, names, by_unit = [], [], {}
    for u in range(units):
        gen = codegen_class()
        for f in kernels[u::units]:
            gen.add_function(f)
        sources.append(SourceFile(f"{prefix}_{u}.c", gen.source()))
        names += gen.function_names
        by_unit[sources[-1].name] = tuple(gen.function_names)
    runtime = [crt_source(name) for name in toolchain.runtime_sources]
    return CSourceModule(sources, names, toolchain, extra_sources=runtime, unit_functions=by_unit)
