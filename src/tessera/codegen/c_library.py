"""Model-independent C functions kernels call: the packed-panel GEMM and the row kernels.

Each is written in C once (c_gemm.py, c_rows.py) and reaches a build one of
two ways:

* inline: its definition goes into every translation unit that calls it, as
  a `static` function among the unit's helpers (microcontrollers, where the
  tuner counts each kernel's own instructions, and whatever builds one unit
  by hand);
* as a library unit (host builds, `codegen/c_host.py`): the functions a
  module calls are defined once, in a translation unit of their own, and the
  kernels' units only declare them. gcc then parses <immintrin.h> and
  optimises the GEMM once per build instead of once per kernel unit: a cold
  ResNet-50 build spent 2 x 1.2 s of its 7 s of gcc on the two copies. The
  unit's text depends only on which functions it holds (sorted), not on the
  model, so its object is served from the kernel cache to later builds.

A library unit's functions are hidden (one shared library each) and weak:
two pieces of a composite target may both hold a library unit, with the
same functions compiled for different flags, and the link then keeps one
copy. Every piece of a module runs on the same CPU, so either copy serves.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..op.nn.gemm import GemmKernel
from .c_fast_math import DEPENDS as FAST_MATH_DEPENDS
from .c_gemm import (C_BLOCK_SOURCE, EPILOGUE_KEY, EPILOGUE_SOURCE, HEADERS, HEADERS_KEY, TRANSPOSE8_KEY,
                     TRANSPOSE8_SOURCE, entry_source, gemm_source)
from .c_helpers import helper_name, helper_source
from .c_rows import ROW_KERNEL_HELPERS, ROW_KERNELS, SPECIALISED, USES_INTRINSICS

UNIT_SUFFIX = "_library.c"  # a library unit's file name: the module's prefix, then this


def is_library_unit(name: str) -> bool:
    """Whether the translation unit called `name` is a library unit (its kernels' units call into it)."""
    return name.endswith(UNIT_SUFFIX)


def calling_units(sources: Mapping[str, str]) -> dict[str, str]:
    """`sources` (unit name -> C text) without the library units: what the kernels themselves call."""
    return {name: text for name, text in sources.items() if not is_library_unit(name)}


LIBRARY_MACRO = "TS_LIBRARY"  # a library unit's linkage, in place of `static`
LIBRARY_MACRO_LINES = (
    f"#if defined(__GNUC__)\n#define {LIBRARY_MACRO} __attribute__((weak, visibility(\"hidden\")))\n"
    f"#else\n#define {LIBRARY_MACRO}\n#endif"
)


@dataclass(frozen=True)
class LibraryFunction:
    """One function kernels call, `symbol`, and the C it takes.

    `inline_parts` are (helper name, C text) pairs in definition order, the
    function itself last, all `static`: what a unit that defines it inline
    adds to its helpers. `library_parts` are the same for a library unit,
    where the entry points have external linkage (a GEMM brings all of its
    entries, so the unit's text does not depend on which one a model calls).
    `prototype` declares the function in the units that call it. A function
    that is not `shared` is defined inline on the host too (c_rows.SPECIALISED).
    """

    symbol: str
    inline_parts: tuple[tuple[str, str], ...]
    library_parts: tuple[tuple[str, str], ...]
    prototype: str
    shared: bool = True


@functools.cache  # (per call site otherwise: eight entries' C text each time)
def gemm_function(kernel: GemmKernel, entry: str) -> LibraryFunction:
    """The GEMM entry `entry` of `kernel` (one of `kernel.entries`)."""
    common = ((HEADERS_KEY, HEADERS), ("ts_sgemm_c_block_bytes", C_BLOCK_SOURCE), (EPILOGUE_KEY, EPILOGUE_SOURCE),
              (TRANSPOSE8_KEY, TRANSPOSE8_SOURCE), (f"{kernel.symbol}_driver", gemm_source(kernel)))
    definition = entry_source(kernel, entry)
    return LibraryFunction(
        entry,
        (*common, (entry, definition)),
        (*common, *((e, _external(entry_source(kernel, e), e)) for e in kernel.entries)),
        _prototype(definition, entry),
    )


@functools.cache
def row_function(symbol: str) -> LibraryFunction:
    """The row kernel `symbol` (c_rows.ROW_KERNELS), after the fast-math helpers it calls."""
    fast_math, source = ROW_KERNELS[symbol]
    helpers = []
    for kind in fast_math:
        helpers += [*FAST_MATH_DEPENDS[kind], kind]
    parts = (*(((HEADERS_KEY, HEADERS),) if symbol in USES_INTRINSICS else ()),
             *((helper_name(k, "float32"), helper_source(k, "float32")) for k in dict.fromkeys(helpers)),
             *ROW_KERNEL_HELPERS.get(symbol, ()))
    return LibraryFunction(symbol, (*parts, (symbol, source)), (*parts, (symbol, _external(source, symbol))),
                           _prototype(source, symbol), shared=symbol not in SPECIALISED)


def library_source(functions: Iterable[LibraryFunction]) -> str:
    """The C text of a library unit defining `functions` (in order of their symbols, so deterministic)."""
    parts: dict[str, str] = {}
    for fn in sorted(functions, key=lambda f: f.symbol):
        for name, text in fn.library_parts:
            parts.setdefault(name, text)
    preamble = ["/* Generated by tessera. Do not edit. */", "#include <math.h>", "#include <stddef.h>",
                "#include <stdint.h>", "", LIBRARY_MACRO_LINES]
    return "\n\n".join(["\n".join(preamble), *parts.values()]) + "\n"


def _signature(source: str, symbol: str) -> re.Match[str]:
    # (a parameter may be a function pointer: one level of parentheses inside the list)
    found = re.search(rf"^static void {re.escape(symbol)}\((?P<params>(?:[^()]|\([^()]*\))*)\) \{{", source,
                      re.MULTILINE)
    if found is None:
        raise ValueError(f"library function {symbol}: no `static void {symbol}(...) {{` in its C text")
    return found


def _prototype(source: str, symbol: str) -> str:
    return f"void {symbol}({_signature(source, symbol)['params']});"


def _external(source: str, symbol: str) -> str:
    """`source` with `symbol` defined with the library unit's linkage instead of `static`."""
    found = _signature(source, symbol)
    return f"{source[:found.start()]}{LIBRARY_MACRO} void{source[found.start() + len('static void'):]}"
