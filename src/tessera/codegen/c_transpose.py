"""C text of the float32 matrix transpose the positions-as-rows pointwise convolution calls (`op.nn.conv_gemm`).

`ts_transpose_float32(rows, cols, src, dst)` writes dst (cols x rows) =
srcᵀ (src rows x cols, both dense). Whole 8 x 8 blocks go through eight
ymm registers (unpack, shuffle, then a 128-bit lane swap: the textbook AVX
transpose); a strided scalar loop, which gcc does not vectorise, took about
a nanosecond per element. Blocks of 8 rows are shared among OpenMP threads
(the GEMM before ran on them too). The ragged edges, and targets without
AVX, copy element by element. The unit includes `c_gemm.HEADERS` for the
intrinsics.
"""

from __future__ import annotations

from ..op.nn.conv_gemm import TRANSPOSE
from ..te.parallel import PARALLEL_MIN_WORK

TRANSPOSE_SOURCE = f"""static void {TRANSPOSE}(int64_t rows, int64_t cols, const float* restrict src,
    float* restrict dst) {{
  int64_t done = 0;  /* rows transposed in whole blocks of 8 */
#if defined(__AVX2__) || defined(__AVX512F__)
  const int64_t blocks = rows / 8, cols8 = cols / 8 * 8;
#if defined(_OPENMP)
#pragma omp parallel for if (rows * cols >= {PARALLEL_MIN_WORK}) schedule(static)
#endif
  for (int64_t block = 0; block < blocks; ++block) {{
    const int64_t i = block * 8;
    for (int64_t j = 0; j < cols8; j += 8) {{
      const float* s = src + i * cols + j;
      __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + cols), r2 = _mm256_loadu_ps(s + 2 * cols);
      __m256 r3 = _mm256_loadu_ps(s + 3 * cols), r4 = _mm256_loadu_ps(s + 4 * cols);
      __m256 r5 = _mm256_loadu_ps(s + 5 * cols), r6 = _mm256_loadu_ps(s + 6 * cols);
      __m256 r7 = _mm256_loadu_ps(s + 7 * cols);
      /* pairs of rows interleaved, then quads: u_k holds column k of rows 0-3 and k + 4 of them, halves */
      __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float* d = dst + j * rows + i;
      _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(d + rows, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(d + 2 * rows, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(d + 3 * rows, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(d + 4 * rows, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(d + 5 * rows, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(d + 6 * rows, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(d + 7 * rows, _mm256_permute2f128_ps(u3, u7, 0x31));
    }}
    for (int64_t j = cols8; j < cols; ++j)
      for (int64_t r = i; r < i + 8; ++r) dst[j * rows + r] = src[r * cols + j];
  }}
  done = blocks * 8;
#endif
  for (int64_t i = done; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
}}"""
