"""Small static inline C helpers that generated kernels call.

Each helper is generated for one C type on first use, so a translation unit
holds only what it needs, in a deterministic order.
"""

from __future__ import annotations

from .. import dtype as dt
from . import c_fast_math


def helper_name(kind: str, dtype: str) -> str:
    return f"ts_{kind}_{dtype}"


# int8 dot products with int32 accumulation, picked by the C compiler's target
# features: MVE (Helium, Cortex-M55) 16 lanes per instruction, the DSP
# extension (Cortex-M4/M7) two 16-bit multiply-accumulates per __smlad, else
# scalar. Same generated text for every target, so builds stay deterministic.
# INT8_SIMD comes first: the headers and the rotating sign extension both use.
INT8_SIMD = r"""#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>
#elif defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#include <string.h>
/* bytes 1 and 3 of x sign-extended to halfwords: one SXTB16 with its rotate (gcc emits a separate ROR for
   __sxtb16(__ror(x, 8))) */
static inline uint32_t ts_sxtb16_ror8(uint32_t x) {
  uint32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
  return r;
}
#endif"""

DOT_S8 = r"""static inline int32_t ts_dot_int8(const int8_t* a, const int8_t* b, int32_t n, int32_t acc) {
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
  for (; n > 0; n -= 16, a += 16, b += 16) {
    mve_pred16_t p = vctp8q((uint32_t)n);
    acc = vmladavaq_p_s8(acc, vldrbq_z_s8(a, p), vldrbq_z_s8(b, p), p);
  }
  return acc;
#else
#if defined(__ARM_FEATURE_DSP)
  for (; n >= 4; n -= 4, a += 4, b += 4) {
    uint32_t x, y;
    memcpy(&x, a, 4);
    memcpy(&y, b, 4);
    acc = __smlad(__sxtb16(x), __sxtb16(y), acc);  /* bytes 0 and 2 */
    acc = __smlad(ts_sxtb16_ror8(x), ts_sxtb16_ror8(y), acc);  /* bytes 1 and 3 */
  }
#endif
  for (; n > 0; --n) acc += (int32_t)*a++ * (int32_t)*b++;
  return acc;
#endif
}"""

# two weight rows against one activation run: each activation word is loaded and extended once
DOT2_S8 = r"""static inline void ts_dot2_int8(const int8_t* a, const int8_t* b0, const int8_t* b1, int32_t n,
                                int32_t* acc0, int32_t* acc1) {
  int32_t s0 = *acc0, s1 = *acc1;
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
  for (; n > 0; n -= 16, a += 16, b0 += 16, b1 += 16) {
    mve_pred16_t p = vctp8q((uint32_t)n);
    int8x16_t x = vldrbq_z_s8(a, p);
    s0 = vmladavaq_p_s8(s0, x, vldrbq_z_s8(b0, p), p);
    s1 = vmladavaq_p_s8(s1, x, vldrbq_z_s8(b1, p), p);
  }
#else
#if defined(__ARM_FEATURE_DSP)
  for (; n >= 4; n -= 4, a += 4, b0 += 4, b1 += 4) {
    uint32_t x, y0, y1;
    memcpy(&x, a, 4);
    memcpy(&y0, b0, 4);
    memcpy(&y1, b1, 4);
    uint32_t even = __sxtb16(x), odd = ts_sxtb16_ror8(x);
    s0 = __smlad(even, __sxtb16(y0), s0);
    s0 = __smlad(odd, ts_sxtb16_ror8(y0), s0);
    s1 = __smlad(even, __sxtb16(y1), s1);
    s1 = __smlad(odd, ts_sxtb16_ror8(y1), s1);
  }
#endif
  for (; n > 0; --n, ++a) {
    s0 += (int32_t)*a * (int32_t)*b0++;
    s1 += (int32_t)*a * (int32_t)*b1++;
  }
#endif
  *acc0 = s0;
  *acc1 = s1;
}"""


# int32 saturated to int8's range: one SSAT instruction on cores with the
# saturation extension (Cortex-M3 and up), two compares elsewhere.
SSAT8 = r"""#if defined(__ARM_FEATURE_SAT)
#include <arm_acle.h>
#endif
static inline int32_t ts_ssat8_int32(int32_t a) {
#if defined(__ARM_FEATURE_SAT)
  return __ssat(a, 8);
#else
  return a < -128 ? -128 : (a > 127 ? 127 : a);
#endif
}"""


def helper_source(kind: str, dtype: str) -> str:
    simd = {"int8_simd": INT8_SIMD, "dot": DOT_S8, "dot2": DOT2_S8}
    if kind in simd:
        return simd[kind]
    if kind == "ssat8":
        return SSAT8
    if kind in c_fast_math.SOURCES and dtype == "float32":
        return c_fast_math.SOURCES[kind]
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
