"""C text of the 2-d pooling kernels (`tessera.op.nn.pool_rows.Pool2dKernel`, which says why).

Output rows and columns are split where windows start to reach past the
input: inside, a row of outputs reads its window's taps with constant
offsets and no test, so gcc unrolls the taps and vectorises the row; the
border positions test each tap (an average also counts its window there).
Planes are split over OpenMP threads.
"""

from __future__ import annotations

from ..op.nn.pool_rows import Pool2dKernel
from ..te.parallel import PARALLEL_MIN_WORK


def pool2d_source(k: Pool2dKernel) -> str:
    (kh, kw), (sh, sw) = k.kernel, k.strides
    neutral, combine = ("0.0f", "acc + v") if k.average else ("-INFINITY", "acc > v ? acc : v")
    inside = (f"acc / {kh * kw}.0f" if k.average else "acc")
    border = ("acc / (float)(count > 0 ? count : 1)" if k.average else "acc")
    count_rows = ("const int64_t top = y0 > lo_y ? y0 : lo_y, bottom = y0 + KH < hi_y ? y0 + KH : hi_y;\n"
                  "      const int64_t rows = bottom > top ? bottom - top : 0;") if k.average else ""
    count = ("const int64_t left = x0 > lo_x ? x0 : lo_x, right = x0 + KW < hi_x ? x0 + KW : hi_x;\n"
             "        const int64_t count = rows * (right > left ? right - left : 0);") if k.average else ""
    unused = "" if k.average else "\n  (void)lo_y; (void)hi_y; (void)lo_x; (void)hi_x;"
    text = f"""/* {kh}x{kw} {'average' if k.average else 'max'} pooling, stride {sh}x{sw}, of `planes` h x w planes into oh x ow */
static void {k.symbol}(int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t pt, int64_t pl,
    int64_t lo_y, int64_t hi_y, int64_t lo_x, int64_t hi_x, const float* restrict x, float* restrict y) {{
  enum {{ KH = {kh}, KW = {kw}, SH = {sh}, SW = {sw} }};{unused}
  /* outputs whose windows lie inside the input: rows [oy0, oy1), columns [ox0, ox1) */
  int64_t oy1 = h - KH + pt >= 0 ? (h - KH + pt) / SH + 1 : 0, ox1 = w - KW + pl >= 0 ? (w - KW + pl) / SW + 1 : 0;
  if (oy1 > oh) oy1 = oh;
  if (ox1 > ow) ox1 = ow;
  int64_t oy0 = (pt + SH - 1) / SH, ox0 = (pl + SW - 1) / SW;
  if (oy0 > oy1) oy0 = oy1;
  if (ox0 > ox1) ox0 = ox1;
#if defined(_OPENMP)
#pragma omp parallel for if (planes * oh * ow * KH * KW >= {PARALLEL_MIN_WORK}) schedule(static)
#endif
  for (int64_t p = 0; p < planes; ++p) {{
    const float* in = x + p * h * w;
    for (int64_t oy = 0; oy < oh; ++oy) {{
      const int64_t y0 = oy * SH - pt;
      float* out = y + (p * oh + oy) * ow;
      {count_rows}
      const int64_t first = oy >= oy0 && oy < oy1 ? ox0 : ow;  /* a border row tests every column */
      const int64_t last = oy >= oy0 && oy < oy1 ? ox1 : ow;
      for (int64_t ox = 0; ox < ow; ++ox) {{
        if (ox == first) ox = last;  /* the inside columns, below */
        if (ox >= ow) break;
        const int64_t x0 = ox * SW - pl;
        {count}
        float acc = {neutral};
        for (int64_t ky = 0; ky < KH; ++ky) {{
          if (y0 + ky < 0 || y0 + ky >= h) continue;
          for (int64_t kx = 0; kx < KW; ++kx) {{
            if (x0 + kx < 0 || x0 + kx >= w) continue;
            const float v = in[(y0 + ky) * w + x0 + kx];
            acc = {combine};
          }}
        }}
        out[ox] = {border};
      }}
      if (first >= last) continue;
      const float* row = in + y0 * w + (first * SW - pl);
      for (int64_t ox = first; ox < last; ++ox) {{
        const float* win = row + (ox - first) * SW;
        float acc = win[0];
#pragma GCC unroll {kh * kw}
        for (int t = 1; t < KH * KW; ++t) {{
          const float v = win[(t / KW) * w + t % KW];
          acc = {combine};
        }}
        out[ox] = {inside};
      }}
    }}
  }}
}}"""
    return "\n".join(line for line in text.splitlines() if line.strip())  # (the max has no counts)
