"""Polynomial float32 exp, tanh and erf as inline C that gcc vectorises.

Kernels call these in place of libm's expf, tanhf and erff for every float32
exp, tanh and erf (softmax, sigmoid, SiLU, GELU, tanh-GELU...): a libm call in
a loop body keeps the loop scalar, while these are straight-line arithmetic
and integer bit operations, which gcc -O3 turns into vector code (checked
with -fopt-info-vec for -march=x86-64-v2, x86-64-v3 (AVX2) and AVX-512).

Accuracy, measured against float64 (tests/op/test_fast_math.py sweeps every
1024th float32 bit pattern of either sign, 8192 inputs per binade and about
4.2 million in all, plus the edge cases, and asserts these bounds); "ulp" is
one unit in the last place of the float32 result, and the bound 2.5e-7 is
about two ulp (2^-22 = 2.4e-7):

==========  ==================================  ==================================
function    max relative error (normal result)  special values
==========  ==================================  ==================================
exp         2.5e-7 (measured 7.9e-8)            exp(NaN) = NaN, exp(+inf) = +inf,
                                                exp(-inf) = 0, overflow to +inf past
                                                88.72; results below FLT_MIN are
                                                within 1.5e-45 (one subnormal step)
tanh        2.5e-7 (measured 1.4e-7)            odd; tanh(+-0) = +-0, NaN stays
                                                NaN, +-1 from |x| > 9.02
erf         2.5e-7 (measured 1.7e-7)            odd; erf(+-0) = +-0, NaN stays
                                                NaN, +-1 from |x| > 4
1 + exp     2.5e-7 (measured 1.2e-7)            1 + exp(-inf) = 1, +inf past 88.72,
                                                NaN stays NaN
1 + tanh    3.1e-7 (measured 1.4e-7)            2 at +inf, 0 at -inf, NaN stays NaN
==========  ==================================  ==================================

`1 + exp(y)` (in float32 TIR, either order) is one helper, ts_one_plus_exp_float32
(c_source picks it): the denominator of sigmoid and SiLU, about a third fewer
vector instructions than 1 + ts_exp_float32 (see ONE_PLUS_EXP_SOURCE).
Through it sigmoid's measured error is 1.4e-7, SiLU's (x / (1 + e^-x)) as
small, down to x = -88.72, below which both are 0 as with libm's expf.
SiLU itself, `x / (1 + exp(-x))` with the same x, takes a copy of the helper
that does not put a NaN argument back (ts_silu_denominator_float32): the
numerator carries it. Same bits otherwise; the SiLU loop took 0.69x the time
for AVX2 and 0.81x for AVX-512 (AMD EPYC Zen 4), with the clamps as two
integer minimums (see `_clamp_bits`) in both helpers.
`1 + tanh(u)` (tanh-GELU's factor) is 2 / (1 + e^(-2u)) through the same helper:
one exp and a division instead of tanh's two branches, and no cancellation
where tanh(u) nears -1 (its result stays within the bound while normal).

Near zero the relative bound holds too (tanh and erf use odd polynomials
there, exact at 0), so no separate absolute bound is needed except for
subnormal inputs and results, where one subnormal step (1.5e-45) is the
absolute error.

How: exp reduces x = n ln2 + r with |r| <= ln2/2 (Cody and Waite's split
ln2), evaluates a degree-6 polynomial for e^r and scales by 2^n built from
its exponent bits, in two halves so that subnormal results and the largest
finite ones need no special case. tanh is an odd polynomial for |x| < 0.625
and 1 - 2 / (1 + e^(2|x|)) above (the 1 + exp helper). erf is an odd
polynomial for |x| < 1 and 1 - e^(-x^2) R(1/|x|) for 1 <= |x| <= 4. The polynomials are least-maximum
relative error fits (Lawson's iteration) made for this module.
The round-to-nearest trick for n needs the default rounding mode, which
generated code never changes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

# e^r = 1 + r + r^2 (EXP[0] + EXP[1] r + ...), |r| <= ln2 / 2
EXP = ("0.499999935f", "0.166665207f", "0.0416683874f", "0.00836870996f", "0.00138146131f")
# tanh(x) = x + x^3 (TANH[0] + TANH[1] x^2 + ...), |x| < 0.625
TANH = ("-0.333332819f", "0.133314422f", "-0.0537397143f", "0.0206390847f", "-0.00570498416f")
# erf(x) = x (ERF[0] + ERF[1] x^2 + ...), |x| < 1
ERF = ("1.12837917f", "-0.376126258f", "0.112835851f", "-0.0268538118f", "0.00518832748f",
       "-0.000801019188f", "7.85385562e-05f")
# erfc(x) e^(x^2) = ERFC[0] + ERFC[1] u + ..., u = 1/x, 1 <= x <= 4
ERFC = ("0.000253097599f", "0.559315752f", "0.0401600651f", "-0.464668543f", "0.480942722f",
        "-0.219073958f", "0.00403086096f", "0.0379979624f", "-0.0113744119f")


def _horner(coefficients: Sequence[str], var: str) -> str:
    """C text of c0 + var*(c1 + var*(c2 + ...))."""
    text = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        text = f"{c} + {var} * ({text})"
    return text


def _doubled(coefficients: Sequence[str]) -> tuple[str, ...]:
    """Each float32 literal times two, exactly (a float32 doubled is a float32; 9 digits round-trip it)."""
    return tuple(f"{2 * struct.unpack('f', struct.pack('f', float(c.rstrip('f'))))[0]:.9g}f" for c in coefficients)


# Selects here are integer operations on bit patterns: a float select keeps gcc from
# vectorising for AVX2 under the default -ftrapping-math, as it sinks the arithmetic that feeds
# one arm into a branch and then will not speculate it. A float's pattern read as a signed
# integer orders positive floats as the floats (NaN's pattern lies above every finite one);
# read as an unsigned one it orders negative floats by magnitude, above every positive pattern.
# So clamping x to [-a, b] is two integer minimums, min_signed(x, b) then min_unsigned(that, -a),
# and a magnitude (sign bit clear) is NaN when it exceeds infinity's pattern as a signed integer:
# single AVX2 instructions each (AVX2 has no unsigned compare). The last step blends by mask.
UNION = "union { float f; uint32_t u; }"


def _clamp_bits(low: float, high: float) -> str:
    """C statements clamping `v.f` to [low, high] (low < 0 < high) on its pattern, as above; a NaN
    becomes `high` or `low` by its sign."""
    high_bits = struct.unpack("<I", struct.pack("<f", high))[0]
    low_bits = struct.unpack("<I", struct.pack("<f", low))[0]
    return (f"  int32_t below_high = (int32_t)v.u < {high_bits:#010x} ? (int32_t)v.u : {high_bits:#010x};\n"
            f"  v.u = (uint32_t)below_high < {low_bits:#010x}u ? (uint32_t)below_high : {low_bits:#010x}u;")


NAN_BACK = "  v.u |= (int32_t)magnitude > 0x7f800000 ? 0x7fc00000u : 0u;  /* NaN in, NaN out */"
BLEND = r"""static inline float ts_blend_float32(uint32_t take_a, float a, float b) {
  /* take_a ? a : b, with take_a 0 or 1, by mask */
  union { float f; uint32_t u; } va, vb;
  va.f = a;
  vb.f = b;
  uint32_t mask = 0u - take_a;
  va.u = (va.u & mask) | (vb.u & ~mask);
  return va.f;
}"""

EXP_SOURCE = f"""static inline float ts_exp_float32(float x) {{
  {UNION} v;
  v.f = x;
  uint32_t magnitude = v.u & 0x7fffffffu;
  /* x clamped to [-104, 104]: e^104 overflows, e^-104 rounds to 0 (NaN is clamped too, and put back last) */
{_clamp_bits(-104.0, 104.0)}
  float xc = v.f;
  /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer */
  float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.0f + (r + r * r * ({_horner(EXP, "r")}));
  /* 2^n in two halves, each a normal float: n runs from -150 (subnormal results) to 150 */
  int32_t k = (int32_t)n;
  int32_t k1 = k / 2;
  {UNION} s1, s2;
  s1.u = (uint32_t)(k1 + 127) << 23;
  s2.u = (uint32_t)(k - k1 + 127) << 23;
  v.f = p * s1.f * s2.f;
{NAN_BACK}
  return v.f;
}}"""

# 1 + e^x, the denominator of every sigmoid (sigmoid, SiLU, Swish): the argument is clamped to
# [-80, 89], where 1 + e^-80 already rounds to 1 and e^89 overflows, so the scale is one normal
# float 2^(n-1), read off the rounding sum's low bits, times 2 e^r (exp needs two halves and a
# conversion for its subnormal results); about a third fewer vector instructions than 1 + exp.
def _one_plus_exp_source(name: str, nan_back: bool) -> str:
    """The 1 + e^x helper `name`; without `nan_back` a NaN argument gives a number (for callers whose
    result is NaN for that argument anyway)."""
    magnitude = "  uint32_t magnitude = v.u & 0x7fffffffu;\n" if nan_back else ""
    what_of_nan = "NaN is clamped too, and put back last" if nan_back else "a NaN is clamped too, and stays a number"
    put_back = "\n" + NAN_BACK if nan_back else ""
    return f"""static inline float {name}(float x) {{
  {UNION} v;
  v.f = x;
{magnitude}  /* x clamped to [-80, 89] ({what_of_nan}) */
{_clamp_bits(-80.0, 89.0)}
  float xc = v.f;
  /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer, which the low bits of t hold */
  {UNION} t;
  t.f = xc * 1.44269504f + 12582912.0f;
  float n = t.f - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  /* 2 e^r, the coefficients of EXP doubled (exactly) and in one Horner chain: two operations fewer */
  float p2 = {_horner(("2.0f", "2.0f", *_doubled(EXP)), "r")};
  /* 2^(n-1) for n in [-115, 128]: the exponent field n + 126 from t's low 9 bits */
  {UNION} s;
  s.u = (t.u + 126u) << 23;
  v.f = 1.0f + p2 * s.f;{put_back}
  return v.f;
}}"""


ONE_PLUS_EXP_SOURCE = _one_plus_exp_source("ts_one_plus_exp_float32", nan_back=True)
# SiLU's x / (1 + e^-x): x carries a NaN through the division, so the denominator need not (a SiLU
# loop for AVX2 is 24 instructions a vector instead of 29, with the same bits for every other input)
SILU_DENOMINATOR_SOURCE = _one_plus_exp_source("ts_silu_denominator_float32", nan_back=False)

TANH_SOURCE = f"""static inline float ts_tanh_float32(float x) {{
  float a = fabsf(x);
  float a2 = a * a;
  float small = a + a * a2 * ({_horner(TANH, "a2")});
  /* rounds to 1 from |x| = 9.02 on; e^(2|x|) + 1 is +inf from |x| = 44.4, and NaN for NaN */
  float big = 1.0f - 2.0f / ts_one_plus_exp_float32(2.0f * a);
  return copysignf(ts_blend_float32(a < 0.625f, small, big), x);
}}"""

ERF_SOURCE = f"""static inline float ts_erf_float32(float x) {{
  float a = fabsf(x);
  float x2 = x * x;
  float small = x * ({_horner(ERF, "x2")});
  /* t = |x| clamped to the fit's [1, 4] (1 - erfc rounds to 1 from 4 on) */
  {UNION} v;
  v.f = a;
  uint32_t nan = (int32_t)v.u > 0x7f800000 ? 0x7fc00000u : 0u;
  v.u = v.u < 0x40800000u ? v.u : 0x40800000u;
  v.u = v.u > 0x3f800000u ? v.u : 0x3f800000u;
  float t = v.f;
  float u = 1.0f / t;
  float tail = ts_exp_float32(-(t * t)) * ({_horner(ERFC, "u")});
  v.f = copysignf(1.0f - tail, x);
  v.u |= nan;  /* NaN in, NaN out */
  return ts_blend_float32(a < 1.0f, small, v.f);
}}"""

# each source defines ts_<kind>_float32 (c_helpers.helper_name); dependencies first
SOURCES = {"blend": BLEND, "exp": EXP_SOURCE, "one_plus_exp": ONE_PLUS_EXP_SOURCE,
           "silu_denominator": SILU_DENOMINATOR_SOURCE, "tanh": TANH_SOURCE, "erf": ERF_SOURCE}
# the Intrinsic values whose float32 calls go to these helpers instead of libm
INTRINSICS = ("exp", "tanh", "erf")
# helpers a helper calls, declared before it
DEPENDS = {"blend": (), "exp": (), "one_plus_exp": (), "silu_denominator": (), "tanh": ("one_plus_exp", "blend"),
           "erf": ("exp", "blend")}
