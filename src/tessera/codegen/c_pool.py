"""C text of the 2-d float32 max-pool row kernel (`tessera.op.nn.pool_rows`).

Per output row, the maximum of the window's input rows goes into a row
buffer (a contiguous loop gcc vectorises: the builds pass
-fno-trapping-math, so `a > b ? a : b` becomes a vector max), then each
output takes the maximum of its window's columns of that buffer. The common
3-wide stride-2 window (ResNet, ShuffleNet) has a loop of its own with
constant strides, which gcc vectorises with even/odd shuffles; other
windows, and the clipped ones at the borders, run a scalar loop.
"""

from __future__ import annotations

from ..op.nn.pool_rows import MAX_POOL_ROWS

PARALLEL_ELEMENTS = 1 << 18  # window elements read: a pool this large pays for an OpenMP fork and join

MAX_POOL_ROWS_SOURCE = f"""static void {MAX_POOL_ROWS}(int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
    int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, const float* x, float* y) {{
#if defined(_OPENMP)
#pragma omp parallel for if (planes * oh * ow * kh * kw >= {PARALLEL_ELEMENTS}) schedule(static)
#endif
  for (int64_t p = 0; p < planes; ++p) {{
    float row[w];
    const float* plane = x + p * h * w;
    for (int64_t oy = 0; oy < oh; ++oy) {{
      float* out = y + (p * oh + oy) * ow;
      const int64_t top = oy * sh - ph;
      const int64_t r0 = top < 0 ? 0 : top, r1 = top + kh < h ? top + kh : h;
      if (r0 >= r1) {{  /* a window wholly in the padding */
        for (int64_t ox = 0; ox < ow; ++ox) out[ox] = -INFINITY;
        continue;
      }}
      for (int64_t j = 0; j < w; ++j) row[j] = plane[r0 * w + j];
      for (int64_t r = r0 + 1; r < r1; ++r) {{
        const float* src = plane + r * w;
        for (int64_t j = 0; j < w; ++j) row[j] = row[j] > src[j] ? row[j] : src[j];
      }}
      /* outputs whose window lies inside the row: [first, last) */
      int64_t first = (pw + sw - 1) / sw, last = w - kw + pw >= 0 ? (w - kw + pw) / sw + 1 : 0;
      if (last > ow) last = ow;
      if (first > last) first = last;
      if (kw == 3 && sw == 2) {{
        const float* at = row - pw;
        for (int64_t ox = first; ox < last; ++ox) {{
          const float a = at[2 * ox], b = at[2 * ox + 1], c = at[2 * ox + 2];
          const float ab = a > b ? a : b;
          out[ox] = ab > c ? ab : c;
        }}
      }} else {{
        for (int64_t ox = first; ox < last; ++ox) {{
          const float* at = row + ox * sw - pw;
          float m = at[0];
          for (int64_t c = 1; c < kw; ++c) m = m > at[c] ? m : at[c];
          out[ox] = m;
        }}
      }}
      for (int64_t ox = 0; ox < ow; ++ox) {{  /* the clipped windows at both ends */
        if (ox == first) ox = last;
        if (ox >= ow) break;
        const int64_t left = ox * sw - pw;
        const int64_t c0 = left < 0 ? 0 : left, c1 = left + kw < w ? left + kw : w;
        float m = -INFINITY;
        for (int64_t c = c0; c < c1; ++c) m = m > row[c] ? m : row[c];
        out[ox] = m;
      }}
    }}
  }}
}}"""
