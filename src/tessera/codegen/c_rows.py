"""C text of the row kernels ops call as externs (`tessera.op.nn.softmax_rows`).

A row's sum keeps 16 partial results (one zmm, or two ymm), merged once
per row: plain C that gcc -O3 vectorises, where a single scalar accumulator
stays sequential without -ffast-math. Its maximum is written with
`max_ps` intrinsics behind the ISA macros (as the GEMM microkernel is), since
gcc vectorises no float select under the default -ftrapping-math; `max_ps(x,
t)` returns t when x is NaN, so NaN is skipped, as the staged kernel's
`ts_max_float32` skips it. The unit includes `c_gemm.HEADERS` for it.
"""

from __future__ import annotations

from ..op.nn.conv_depthwise import DEPTHWISE_SYMBOL
from ..op.nn.conv_gemm import TRANSPOSE
from ..op.nn.softmax_rows import SOFTMAX_ROWS
from ..op.row_means import ROW_MEANS
from .c_depthwise import DEPTHWISE_SOURCE
from .c_gemm import TRANSPOSE8_KEY, TRANSPOSE8_SOURCE
from .c_transpose import TRANSPOSE_SOURCE

PARALLEL_ELEMENTS = 1 << 15  # a softmax this large pays for an OpenMP fork and join

SOFTMAX_ROWS_SOURCE = f"""static void {SOFTMAX_ROWS}(int64_t rows, int64_t n, const float* x, float* y) {{
  enum {{ L = 16 }};
#if defined(_OPENMP)
#pragma omp parallel for if (rows * n >= {PARALLEL_ELEMENTS}) schedule(static)
#endif
  for (int64_t i = 0; i < rows; ++i) {{
    const float* xr = x + i * n;
    float* yr = y + i * n;  /* (may be xr: each element is read before it is written) */
    float top_l[L], sum_l[L];
    for (int l = 0; l < L; ++l) {{
      top_l[l] = -INFINITY;
      sum_l[l] = 0.0f;
    }}
    int64_t j = 0;
#if defined(__AVX512F__)
    __m512 t16 = _mm512_set1_ps(-INFINITY);
    for (; j + 16 <= n; j += 16) t16 = _mm512_max_ps(_mm512_loadu_ps(xr + j), t16);
    _mm512_storeu_ps(top_l, t16);
#elif defined(__AVX2__)
    __m256 t8a = _mm256_set1_ps(-INFINITY), t8b = t8a;
    for (; j + 16 <= n; j += 16) {{
      t8a = _mm256_max_ps(_mm256_loadu_ps(xr + j), t8a);
      t8b = _mm256_max_ps(_mm256_loadu_ps(xr + j + 8), t8b);
    }}
    _mm256_storeu_ps(top_l, t8a);
    _mm256_storeu_ps(top_l + 8, t8b);
#endif
    float top = -INFINITY;
    for (; j < n; ++j) top = xr[j] > top ? xr[j] : top;
    for (int l = 0; l < L; ++l) top = top_l[l] > top ? top_l[l] : top;
    for (j = 0; j + L <= n; j += L)
      for (int l = 0; l < L; ++l) {{
        float e = ts_exp_float32(xr[j + l] - top);
        yr[j + l] = e;
        sum_l[l] += e;
      }}
    float total = 0.0f;
    for (; j < n; ++j) {{
      float e = ts_exp_float32(xr[j] - top);
      yr[j] = e;
      total += e;
    }}
    for (int l = 0; l < L; ++l) total += sum_l[l];
    for (j = 0; j < n; ++j) yr[j] = yr[j] / total;
  }}
}}"""

# a mean's sum in 16 partial lanes as the softmax's; bounds whole blocks first (gcc's loop analysis of
# `j + L <= n` on inlined constant arguments warns under -Werror)
ROW_MEANS_SOURCE = f"""static void {ROW_MEANS}(int64_t rows, int64_t n, int64_t stride, const float* x, float* y) {{
  enum {{ L = 16 }};
  const int64_t whole = n / L * L;
#if defined(_OPENMP)
#pragma omp parallel for if (rows * n >= {PARALLEL_ELEMENTS}) schedule(static)
#endif
  for (int64_t i = 0; i < rows; ++i) {{
    const float* xr = x + i * stride;
    float sum_l[L];
    for (int l = 0; l < L; ++l) sum_l[l] = 0.0f;
    for (int64_t j = 0; j < whole; j += L)
      for (int l = 0; l < L; ++l) sum_l[l] += xr[j + l];
    float total = 0.0f;
    for (int64_t j = whole; j < n; ++j) total += xr[j];
    for (int l = 0; l < L; ++l) total += sum_l[l];
    y[i] = total / (float)n;
  }}
}}"""

# the row kernels written with ISA intrinsics: their unit includes c_gemm.HEADERS
USES_INTRINSICS = frozenset({SOFTMAX_ROWS, TRANSPOSE})
# the row kernels every calling unit defines for itself, host builds too (not in a library unit, c_library):
# gcc specialises the depthwise kernel to its call's constant sizes, and efficientnet_block took 1.045x the
# time at one thread (2-core Zen 3, 8 alternating rounds) with it called out of line
SPECIALISED = frozenset({DEPTHWISE_SYMBOL})

# symbol -> the other helpers it calls, (name, C text) each in definition order: declared under their names, so a
# unit with the GEMM too (which packs A through the same transpose) defines each once
ROW_KERNEL_HELPERS: dict[str, tuple[tuple[str, str], ...]] = {
    DEPTHWISE_SYMBOL: ((TRANSPOSE8_KEY, TRANSPOSE8_SOURCE),),
}
# symbol -> (the fast-math helpers it calls, its C text)
ROW_KERNELS: dict[str, tuple[tuple[str, ...], str]] = {
    SOFTMAX_ROWS: (("exp",), SOFTMAX_ROWS_SOURCE),
    DEPTHWISE_SYMBOL: ((), DEPTHWISE_SOURCE),
    TRANSPOSE: ((), TRANSPOSE_SOURCE),
    ROW_MEANS: ((), ROW_MEANS_SOURCE),
}
