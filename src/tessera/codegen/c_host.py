"""The `c` kind's default code generator: PrimFuncs -> C translation units.

Kernels are written one by one; on host targets those that differ only in
integer constants then share one function (`c_shape_class.py`; the
PassContext config `codegen.shape_classes` = False turns it off). The
kernels, or shape classes, are spread over translation units so gcc can
compile them in parallel: about KERNELS_PER_UNIT per unit, or as many as
the current PassContext's `codegen.kernels_per_unit` says (`tessera
compile --timings` sets 1, so that each kernel or shape class is timed on
its own), balanced by the length of their C so that the units take gcc
about as long. On host targets the GEMM and row kernels they call are
compiled once, in a library unit (`c_library.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import TesseraError
from ..runtime.module import CSourceModule
from ..target.toolchain import SourceFile, Toolchain
from ..tir.stmt import PrimFunc
from .c_library import UNIT_SUFFIX as LIBRARY_UNIT_SUFFIX
from .c_library import library_source
from .c_shape_class import SHARED_MACRO, SHARED_MACRO_LINES, shape_classes, shared_source, skeleton
from .c_source import CodeGenC

if TYPE_CHECKING:
    from ..relay.module import IRModule
    from ..target.target import Target

# Enough kernels to amortise gcc's start-up, few enough that cores share the work.
KERNELS_PER_UNIT = 24
KERNELS_PER_UNIT_CONFIG = "codegen.kernels_per_unit"  # PassContext.config key overriding it
SHAPE_CLASSES_CONFIG = "codegen.shape_classes"  # PassContext.config key: False keeps every kernel apart


def kernels_per_unit() -> int:
    """How many kernels go into one translation unit in the current PassContext."""
    from ..transform.pass_infra import PassContext

    value = PassContext.current().config.get(KERNELS_PER_UNIT_CONFIG, KERNELS_PER_UNIT)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TesseraError(f"PassContext config {KERNELS_PER_UNIT_CONFIG!r}: got {value!r}, expected an integer >= 1")
    return value


def primfuncs(mod: "IRModule") -> list[PrimFunc]:
    return [f for _, f in sorted(mod.items(), key=lambda kv: kv[0].name_hint) if isinstance(f, PrimFunc)]


def shares_shape_classes(toolchain: Toolchain) -> bool:
    """Whether kernels differing only in constants share a function: on the host, by default. (On a
    microcontroller the tuner counts each kernel's own instructions, so its kernels stay apart.)"""
    from ..transform.pass_infra import PassContext

    value = PassContext.current().config.get(SHAPE_CLASSES_CONFIG, True)
    if not isinstance(value, bool):
        raise TesseraError(f"PassContext config {SHAPE_CLASSES_CONFIG!r}: got {value!r}, expected True or False")
    return value and toolchain.is_host


@dataclass(frozen=True)
class _Piece:
    """What one unit takes whole: a kernel, or a shape class with its wrappers."""

    first: int  # index of its first kernel, for a stable order inside a unit
    gens: tuple[CodeGenC, ...]  # the kernels' own generators (helpers, includes)
    text: str
    names: tuple[str, ...]


def _pieces(gens: list[CodeGenC], names: list[str], share: bool) -> list[_Piece]:
    texts = ["\n\n".join(g.function_sources) for g in gens]
    if not share:
        return [_Piece(k, (g,), texts[k], (names[k],)) for k, g in enumerate(gens)]
    pieces, taken = [], set(names)
    for group in shape_classes(texts):
        members = [skeleton(texts[k]) for k in group]
        if len(group) == 1 or any(m is None for m in members):
            pieces += [_Piece(k, (gens[k],), texts[k], (names[k],)) for k in group]
            continue
        shared, text = shared_source([m for m in members if m is not None], taken)
        taken.add(shared)
        pieces.append(_Piece(group[0], tuple(gens[k] for k in group), text, tuple(names[k] for k in group)))
    return pieces


def _balanced_units(pieces: list[_Piece], units: int) -> list[list[_Piece]]:
    """Longest first onto the unit with the least C so far (ties: the lower index): deterministic."""
    load = [0] * units
    placed: list[list[_Piece]] = [[] for _ in range(units)]
    for piece in sorted(pieces, key=lambda p: (-len(p.text), p.first)):
        u = min(range(units), key=lambda k: (load[k], k))
        load[u] += len(piece.text)
        placed[u].append(piece)
    return [sorted(unit, key=lambda p: p.first) for unit in placed]


def build_c_module(mod: "IRModule", target: "Target", codegen_class: type[CodeGenC] = CodeGenC,
                   prefix: str = "kernels") -> CSourceModule:
    """Generate C for every PrimFunc of `mod` with `codegen_class`."""
    from ..crt import source as crt_source

    toolchain = target.kind.toolchain(target)
    kernels = primfuncs(mod)
    gens = []
    for f in kernels:
        gen = codegen_class()
        gen.add_function(f)
        gens.append(gen)
    pieces = _pieces(gens, [f.name for f in kernels], shares_shape_classes(toolchain))
    units = max(1, math.ceil(len(pieces) / kernels_per_unit()))
    sources, names, by_unit, library = [], [], {}, {}
    separate_library = toolchain.is_host  # (see c_library: on a microcontroller each unit defines its own)
    for u, unit in enumerate(_balanced_units(pieces, units)):
        gen = codegen_class()
        for piece in unit:
            if len(piece.names) > 1:
                gen.add_helper(SHARED_MACRO, SHARED_MACRO_LINES)
            for k, member in enumerate(piece.gens):
                gen.merge(member, [piece.text] if k == 0 else [], piece.names if k == 0 else [])
        sources.append(SourceFile(f"{prefix}_{u}.c", gen.source(library_unit=separate_library)))
        names += gen.function_names
        by_unit[sources[-1].name] = tuple(gen.function_names)
        library.update({fn.symbol: fn for fn in gen.library_functions})
    if separate_library and library:
        sources.append(SourceFile(f"{prefix}{LIBRARY_UNIT_SUFFIX}", library_source(library.values())))
    runtime = [crt_source(name) for name in toolchain.runtime_sources]
    return CSourceModule(sources, names, toolchain, extra_sources=runtime, unit_functions=by_unit)
