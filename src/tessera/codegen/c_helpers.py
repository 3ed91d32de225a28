"""Small static inline C helpers that generated kernels call.

Each helper is generated for one C type on first use, so a translation unit
holds only what it needs, in a deterministic order.
"""

from __future__ import annotations

from .. import dtype as dt


def helper_name(kind: str, dtype: str) -> str:
    return f"ts_{kind}_{dtype}"


def helper_source(kind: str, dtype: str) -> str:
    c = dt.c_type(dtype)
    name = helper_name(kind, dtype)
    head = f"static inline {c} {name}"
    bodies = {
        "min": f"{head}({c} a, {c} b) {{ return a < b ? a : b; }}",
        "max": f"{head}({c} a, {c} b) {{ return a > b ? a : b; }}",
        # NaN-propagating variants, for reductions that must match NumPy.
        "fmin": f"{head}({c} a, {c} b) {{ return (a < b || a != a) ? a : b; }}",
        "fmax": f"{head}({c} a, {c} b) {{ return (a > b || a != a) ? a : b; }}",
        "floordiv": (
            f"{head}({c} a, {c} b) {{\n"
            f"  {c} q = a / b;\n"
            f"  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}"
        ),
        "floormod": (
            f"{head}({c} a, {c} b) {{\n"
            f"  {c} r = a % b;\n"
            f"  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}"
        ),
        "ffloormod": (
            f"{head}({c} a, {c} b) {{\n"
            f"  {c} r = {'fmodf' if dtype == 'float32' else 'fmod'}(a, b);\n"
            f"  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}"
        ),
        "ipow": (
            f"{head}({c} a, {c} b) {{\n"
            f"  {c} r = 1;\n"
            f"  if (b < 0) return (a == 1) ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);\n"
            f"  while (b) {{ if (b & 1) r *= a; a *= a; b >>= 1; }}\n"
            f"  return r;\n}}"
            if not dt.is_unsigned(dtype) else
            f"{head}({c} a, {c} b) {{\n"
            f"  {c} r = 1;\n"
            f"  while (b) {{ if (b & 1) r *= a; a *= a; b >>= 1; }}\n"
            f"  return r;\n}}"
        ),
        "iabs": f"{head}({c} a) {{ return a < 0 ? ({c})(-a) : a; }}",
        # Both values are arguments, so reads in either arm happen unconditionally:
        # gcc 12 miscompiles if-converted masked loads (GCC PR 114375) in nested
        # loops. TIR allows evaluating both sides of a select.
        "select": f"{head}(int cond, {c} a, {c} b) {{ return cond ? a : b; }}",
    }
    return bodies[kind]
