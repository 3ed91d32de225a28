"""Small static inline C helpers that generated kernels call.

Each helper is generated for one C type on first use, so a translation unit
holds only what it needs, in a deterministic order.
"""

from __future__ import annotations

from .. import dtype as dt
from . import c_fast_math


def helper_name(kind: str, dtype: str) -> str:
    if kind == "narrow":  # one helper for every narrow float format
        return "ts_narrow_float"
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
DOT2_S8 = r"""#if defined(__ARM_FEATURE_DSP) && !(defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1))
/* one word (4 bytes) of the run against both rows */
static inline void ts_dot2_word(const int8_t* a, const int8_t* b0, const int8_t* b1, int32_t* s0, int32_t* s1) {
  uint32_t x, y0, y1;
  memcpy(&x, a, 4);
  memcpy(&y0, b0, 4);
  memcpy(&y1, b1, 4);
  uint32_t even = __sxtb16(x), odd = ts_sxtb16_ror8(x);
  *s0 = __smlad(odd, ts_sxtb16_ror8(y0), __smlad(even, __sxtb16(y0), *s0));
  *s1 = __smlad(odd, ts_sxtb16_ror8(y1), __smlad(even, __sxtb16(y1), *s1));
}
#endif
static inline void ts_dot2_int8(const int8_t* a, const int8_t* b0, const int8_t* b1, int32_t n,
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
  /* four words per iteration (the loop's overhead spread over 32 MACs); the empty asm statements keep gcc
     from hoisting later words' loads above earlier arithmetic, which would spill */
  for (; n >= 16; n -= 16, a += 16, b0 += 16, b1 += 16) {
    ts_dot2_word(a, b0, b1, &s0, &s1);
    __asm__ volatile("" ::: "memory");
    ts_dot2_word(a + 4, b0 + 4, b1 + 4, &s0, &s1);
    __asm__ volatile("" ::: "memory");
    ts_dot2_word(a + 8, b0 + 8, b1 + 8, &s0, &s1);
    __asm__ volatile("" ::: "memory");
    ts_dot2_word(a + 12, b0 + 12, b1 + 12, &s0, &s1);
  }
  for (; n >= 4; n -= 4, a += 4, b0 += 4, b1 += 4) ts_dot2_word(a, b0, b1, &s0, &s1);
#endif
  for (; n > 0; --n, ++a) {
    s0 += (int32_t)*a * (int32_t)*b0++;
    s1 += (int32_t)*a * (int32_t)*b1++;
  }
#endif
  *acc0 = s0;
  *acc1 = s1;
}"""


# one activation run against four weight rows b + k * db (a dense layer): each activation word is loaded
# and extended once for four rows; db is a constant at every call site (immediate offsets from b)
DOT4_S8 = r"""#if defined(__ARM_FEATURE_DSP) && !(defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1))
/* one word (4 bytes) of the run against one row: x's halves are extended once by the caller */
static inline int32_t ts_dot_word_ext(uint32_t xe, uint32_t xo, const int8_t* b, int32_t s) {
  uint32_t y;
  memcpy(&y, b, 4);
  return __smlad(xo, ts_sxtb16_ror8(y), __smlad(xe, __sxtb16(y), s));
}
#endif
static inline void ts_dot4_int8(const int8_t* a, const int8_t* b, int32_t db, int32_t n,
                                int32_t* acc0, int32_t* acc1, int32_t* acc2, int32_t* acc3) {
  int32_t s0 = *acc0, s1 = *acc1, s2 = *acc2, s3 = *acc3;
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
  for (; n > 0; n -= 16, a += 16, b += 16) {
    mve_pred16_t p = vctp8q((uint32_t)n);
    int8x16_t x = vldrbq_z_s8(a, p);
    s0 = vmladavaq_p_s8(s0, x, vldrbq_z_s8(b, p), p);
    s1 = vmladavaq_p_s8(s1, x, vldrbq_z_s8(b + db, p), p);
    s2 = vmladavaq_p_s8(s2, x, vldrbq_z_s8(b + 2 * db, p), p);
    s3 = vmladavaq_p_s8(s3, x, vldrbq_z_s8(b + 3 * db, p), p);
  }
#else
#if defined(__ARM_FEATURE_DSP)
  /* four words per iteration; the empty asm keeps gcc from hoisting later words' loads (spills) */
  for (; n >= 16; n -= 16, a += 16, b += 16) {
    for (int32_t k = 0; k < 16; k += 4) {
      uint32_t x;
      memcpy(&x, a + k, 4);
      uint32_t xe = __sxtb16(x), xo = ts_sxtb16_ror8(x);
      s0 = ts_dot_word_ext(xe, xo, b + k, s0);
      s1 = ts_dot_word_ext(xe, xo, b + db + k, s1);
      s2 = ts_dot_word_ext(xe, xo, b + 2 * db + k, s2);
      s3 = ts_dot_word_ext(xe, xo, b + 3 * db + k, s3);
      __asm__ volatile("" ::: "memory");
    }
  }
  for (; n >= 4; n -= 4, a += 4, b += 4) {
    uint32_t x;
    memcpy(&x, a, 4);
    uint32_t xe = __sxtb16(x), xo = ts_sxtb16_ror8(x);
    s0 = ts_dot_word_ext(xe, xo, b, s0);
    s1 = ts_dot_word_ext(xe, xo, b + db, s1);
    s2 = ts_dot_word_ext(xe, xo, b + 2 * db, s2);
    s3 = ts_dot_word_ext(xe, xo, b + 3 * db, s3);
  }
#endif
  for (; n > 0; --n, ++a, ++b) {
    int32_t x = *a;
    s0 += x * b[0];
    s1 += x * b[db];
    s2 += x * b[2 * db];
    s3 += x * b[3 * db];
  }
#endif
  *acc0 = s0;
  *acc1 = s1;
  *acc2 = s2;
  *acc3 = s3;
}"""

# two activation runs (positions a and a + da) against two weight rows (b and b + db), four sums: each
# loaded word feeds two multiply-accumulates. da and db are constants at every call site, so gcc addresses
# the second run and row with immediate offsets from the one pointer each operand pair advances.
DOT2X2_S8 = r"""#if defined(__ARM_FEATURE_DSP) && !(defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1))
/* one word (4 bytes) of both runs and both rows: position 0's halves are dead before position 1's word is
   loaded, so 4 weight halves and 2 activation halves are live at once */
static inline void ts_dot2x2_word(const int8_t* a, int32_t da, const int8_t* b, int32_t db,
                                  int32_t* s00, int32_t* s01, int32_t* s10, int32_t* s11) {
  uint32_t x, y0, y1;
  memcpy(&y0, b, 4);
  memcpy(&y1, b + db, 4);
  uint32_t y0e = __sxtb16(y0), y0o = ts_sxtb16_ror8(y0), y1e = __sxtb16(y1), y1o = ts_sxtb16_ror8(y1);
  memcpy(&x, a, 4);
  uint32_t xe = __sxtb16(x), xo = ts_sxtb16_ror8(x);
  *s00 = __smlad(xo, y0o, __smlad(xe, y0e, *s00));
  *s01 = __smlad(xo, y1o, __smlad(xe, y1e, *s01));
  memcpy(&x, a + da, 4);
  xe = __sxtb16(x);
  xo = ts_sxtb16_ror8(x);
  *s10 = __smlad(xo, y0o, __smlad(xe, y0e, *s10));
  *s11 = __smlad(xo, y1o, __smlad(xe, y1e, *s11));
}
#endif
static inline void ts_dot2x2_int8(const int8_t* a, int32_t da, const int8_t* b, int32_t db, int32_t n,
                                  int32_t* acc00, int32_t* acc01, int32_t* acc10, int32_t* acc11) {
  int32_t s00 = *acc00, s01 = *acc01, s10 = *acc10, s11 = *acc11;
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
  for (; n > 0; n -= 16, a += 16, b += 16) {
    mve_pred16_t p = vctp8q((uint32_t)n);
    int8x16_t x0 = vldrbq_z_s8(a, p), x1 = vldrbq_z_s8(a + da, p);
    int8x16_t y0 = vldrbq_z_s8(b, p), y1 = vldrbq_z_s8(b + db, p);
    s00 = vmladavaq_p_s8(s00, x0, y0, p);
    s01 = vmladavaq_p_s8(s01, x0, y1, p);
    s10 = vmladavaq_p_s8(s10, x1, y0, p);
    s11 = vmladavaq_p_s8(s11, x1, y1, p);
  }
#else
#if defined(__ARM_FEATURE_DSP)
  /* two words per iteration, so the pointer updates, compare and branch are spread over 32 MACs; the empty
     asm keeps gcc from hoisting the second word's loads above the first's arithmetic, which would need
     more registers than the core has */
  for (; n >= 16; n -= 16, a += 16, b += 16) {
    ts_dot2x2_word(a, da, b, db, &s00, &s01, &s10, &s11);
    __asm__ volatile("" ::: "memory");
    ts_dot2x2_word(a + 4, da, b + 4, db, &s00, &s01, &s10, &s11);
    __asm__ volatile("" ::: "memory");
    ts_dot2x2_word(a + 8, da, b + 8, db, &s00, &s01, &s10, &s11);
    __asm__ volatile("" ::: "memory");
    ts_dot2x2_word(a + 12, da, b + 12, db, &s00, &s01, &s10, &s11);
  }
  if (n >= 8) {
    ts_dot2x2_word(a, da, b, db, &s00, &s01, &s10, &s11);
    __asm__ volatile("" ::: "memory");
    ts_dot2x2_word(a + 4, da, b + 4, db, &s00, &s01, &s10, &s11);
    n -= 8, a += 8, b += 8;
  }
  if (n >= 4) {
    ts_dot2x2_word(a, da, b, db, &s00, &s01, &s10, &s11);
    n -= 4, a += 4, b += 4;
  }
#endif
  for (; n > 0; --n, ++a, ++b) {
    int32_t x0 = a[0], x1 = a[da], y0 = b[0], y1 = b[db];
    s00 += x0 * y0;
    s01 += x0 * y1;
    s10 += x1 * y0;
    s11 += x1 * y1;
  }
#endif
  *acc00 = s00;
  *acc01 = s01;
  *acc10 = s10;
  *acc11 = s11;
}"""

# two adjacent columns of a short run (a depthwise row): acc0 += sum a[k] * b[k], acc1 += sum a[k + 1] * b[k].
# For 3 taps (the call sites' constant n) the DSP path loads a[0..3] once: its even bytes (a0, a2) and odd
# bytes (a1, a3) as halfword pairs give both columns with SMLAD against (b0, b2) and one halfword MLA by b1.
DOT_SLIDE2_S8 = r"""static inline void ts_dot_slide2_int8(const int8_t* a, const int8_t* b, int32_t n, int32_t* acc0,
                                      int32_t* acc1) {
  int32_t s0 = *acc0, s1 = *acc1;
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
  for (; n > 0; n -= 16, a += 16, b += 16) {
    mve_pred16_t p = vctp8q((uint32_t)n);
    int8x16_t y = vldrbq_z_s8(b, p);
    s0 = vmladavaq_p_s8(s0, vldrbq_z_s8(a, p), y, p);
    s1 = vmladavaq_p_s8(s1, vldrbq_z_s8(a + 1, p), y, p);
  }
#elif defined(__ARM_FEATURE_DSP)
  if (n == 3) {
    uint32_t x;
    memcpy(&x, a, 4);
    uint32_t even = __sxtb16(x), odd = ts_sxtb16_ror8(x);
    uint32_t w02 = ((uint32_t)b[0] & 0xffffu) | ((uint32_t)b[2] << 16);
    int32_t w1 = b[1];
    s0 = __smlabb((int32_t)odd, w1, __smlad(even, w02, s0));  /* a0 b0 + a2 b2 + a1 b1 */
    s1 = __smlatb((int32_t)even, w1, __smlad(odd, w02, s1));  /* a1 b0 + a3 b2 + a2 b1 */
    n = 0;
  }
#endif
#if !(defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1))
  for (int32_t k = 0; k < n; ++k) {
    s0 += (int32_t)a[k] * (int32_t)b[k];
    s1 += (int32_t)a[k + 1] * (int32_t)b[k];
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


# float16 and bfloat16 are stored as bit patterns (uint16_t) and computed in float32.
# Narrowing rounds to nearest, ties to even, from double (exact for float and
# int32 sources), so a double rounds once, as NumPy's astype does; overflow
# gives infinity, NaN stays NaN (quiet, its top payload bits kept).
NARROW_FLOAT = r"""#include <string.h>
/* the bits of the value nearest v with `man` mantissa and `exp` exponent bits (float16: 10, 5; bfloat16: 7, 8) */
static inline uint16_t ts_narrow_float(double v, int man, int exp) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  uint16_t sign = (uint16_t)((b >> 63) << (man + exp));
  int e64 = (int)((b >> 52) & 0x7ff);
  uint64_t frac = b & ((UINT64_C(1) << 52) - 1);
  uint32_t inf = ((1u << exp) - 1) << man;
  if (e64 == 0x7ff) return (uint16_t)(sign | inf | (frac ? (1u << (man - 1)) | (uint32_t)(frac >> (52 - man)) : 0));
  if (e64 == 0) return sign;  /* zero or a double subnormal: far below the narrow format's smallest value */
  int e = e64 - 1023 + (1 << (exp - 1)) - 1;  /* the narrow format's biased exponent */
  if (e >= (1 << exp) - 1) return (uint16_t)(sign | inf);
  int shift = 52 - man + (e > 0 ? 0 : 1 - e);  /* bits rounded away; more for a subnormal result */
  if (shift >= 64) return sign;
  uint64_t full = frac | (UINT64_C(1) << 52);
  uint64_t kept = full >> shift, rest = full & ((UINT64_C(1) << shift) - 1), half = UINT64_C(1) << (shift - 1);
  kept += rest > half || (rest == half && (kept & 1));
  /* a normal result's kept bits hold the implicit one: adding carries a rounded-up mantissa into the exponent */
  uint32_t bits = e > 0 ? ((uint32_t)(e - 1) << man) + (uint32_t)kept : (uint32_t)kept;
  return (uint16_t)(sign | (bits >= inf ? inf : bits));
}"""

WIDEN = {
    "float16": r"""static inline float ts_from_float16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {  /* zero or subnormal: man * 2^-24, exact in float */
    float f = (float)man * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  bits = sign | (exp == 0x1fu ? 0x7f800000u : (exp + 112u) << 23) | (man << 13);
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}""",
    "bfloat16": r"""static inline float ts_from_bfloat16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;  /* bfloat16 is the top half of a float */
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}""",
}

NARROW_BITS = {"float16": (10, 5), "bfloat16": (7, 8)}  # mantissa and exponent bits


def helper_source(kind: str, dtype: str) -> str:
    simd = {"int8_simd": INT8_SIMD, "dot": DOT_S8, "dot2": DOT2_S8, "dot2x2": DOT2X2_S8, "dot4": DOT4_S8, "dot_slide2": DOT_SLIDE2_S8}
    if kind in simd:
        return simd[kind]
    if kind == "narrow":
        return NARROW_FLOAT
    if kind == "from":
        return "#include <string.h>\n" + WIDEN[dtype]
    if kind == "to":
        man, exp = NARROW_BITS[dtype]
        return (f"static inline uint16_t {helper_name(kind, dtype)}(double v) "
                f"{{ return ts_narrow_float(v, {man}, {exp}); }}")
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
