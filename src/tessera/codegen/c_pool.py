"""C text of the 2-d pooling kernels (`tessera.op.nn.pool_rows.Pool2dKernel`, which says why).

Every size is an enum constant of the function, so gcc unrolls the row
copies and the taps and knows each loop's trip count. Each OpenMP thread
fills its band buffer with the neutral value once; a band then copies the
input rows its windows read into the buffer's middle (rows above or below
the input are filled again), so the border needs no test. Planes are split
over the threads.
"""

from __future__ import annotations

import textwrap

from ..op.nn.pool_rows import Pool2dKernel
from ..te.parallel import PARALLEL_MIN_WORK


def _counts(k: Pool2dKernel) -> tuple[str, str]:
    """An average's divisors: the per-column counts (before the planes) and the per-row count (per band row)."""
    (h, w), (pt, pl) = k.in_size, k.padding
    lo_y, hi_y, lo_x, hi_x = (0, h, 0, w) if k.counted_end is None else (
        -pt, h + k.counted_end[0], -pl, w + k.counted_end[1])
    columns = f"""  int32_t cols[OW];  /* the taps each output column counts */
  for (int64_t ox = 0; ox < OW; ++ox) {{
    const int64_t x0 = ox * SW - PL, left = x0 > {lo_x} ? x0 : {lo_x}, right = x0 + KW < {hi_x} ? x0 + KW : {hi_x};
    cols[ox] = (int32_t)(right > left ? right - left : 0);
  }}"""
    row = f"""
const int64_t y0 = (oy0 + r) * SH - PT, top = y0 > {lo_y} ? y0 : {lo_y}, bottom = y0 + KH < {hi_y} ? y0 + KH : {hi_y};
const int32_t counted = (int32_t)(bottom > top ? bottom - top : 0);  /* the taps this row counts */"""
    return columns, row


def _indent(text: str, spaces: int) -> str:
    """`text` with each line but a pragma (and a blank one) indented by `spaces`."""
    return textwrap.indent(text, " " * spaces, lambda line: bool(line.strip()) and not line.startswith("#"))


def _row_copy(k: Pool2dKernel) -> str:
    """The copy of input row `src` into band row `dst`: as it is, or (stride 2 across) its even padded columns
    and then, from PWH, its odd ones, so that a window's taps are unit-stride runs over the outputs."""
    if k.strides[1] != 2:
        return "for (int64_t i = 0; i < COPY; ++i) dst[LEFT + i] = src[i];"
    return """for (int64_t m = (LEFT + 1) / 2; 2 * m < LEFT + COPY; ++m) dst[m] = src[2 * m - LEFT];  /* even columns */
for (int64_t m = LEFT / 2; 2 * m + 1 < LEFT + COPY; ++m) dst[PWH + m] = src[2 * m + 1 - LEFT];  /* odd columns */"""


def _band_outputs(k: Pool2dKernel, combine: str, row_count: str, store: str) -> str:
    """The outputs of a band's `rows` rows from `buf`. Stride 1: one flat run over the band's positions, across
    row ends, into `acc_run`, of which each row keeps its first OW. Otherwise a row of outputs at a time."""
    taps = k.kernel[0] * k.kernel[1]
    if k.strides == (1, 1):
        return f"""for (int64_t i = 0; i < (rows - 1) * PW + OW; ++i) {{
  float acc = buf[i];
#pragma GCC unroll {taps}
  for (int t = 1; t < KH * KW; ++t) {{
    const float v = buf[i + (t / KW) * PW + t % KW];
    acc = {combine};
  }}
  acc_run[i] = acc;
}}
for (int64_t r = 0; r < rows; ++r) {{
  float* out = y + (p * OH + oy0 + r) * OW;{_indent(row_count, 2)}
  for (int64_t ox = 0; ox < OW; ++ox) {{
    const float acc = acc_run[r * PW + ox];
{_indent(store, 4)}
  }}
}}"""
    first, column = ("ox", "((t % KW) & 1 ? PWH : 0) + (t % KW) / 2 + ox") if k.strides[1] == 2 else (
        "ox * SW", "ox * SW + t % KW")
    return f"""for (int64_t r = 0; r < rows; ++r) {{
  float* out = y + (p * OH + oy0 + r) * OW;
  const float* win = buf + r * SH * PW;{_indent(row_count, 2)}
  for (int64_t ox = 0; ox < OW; ++ox) {{
    float acc = win[{first}];
#pragma GCC unroll {taps}
    for (int t = 1; t < KH * KW; ++t) {{
      const float v = win[(t / KW) * PW + {column}];
      acc = {combine};
    }}
{_indent(store, 4)}
  }}
}}"""


def pool2d_source(k: Pool2dKernel) -> str:
    (kh, kw), (sh, sw), (h, w), (oh, ow), (pt, pl) = k.kernel, k.strides, k.in_size, k.out_size, k.padding
    neutral, combine = ("0.0f", "acc + v") if k.average else ("-INFINITY", "acc > v ? acc : v")
    pw, band = k.padded_width, k.band_rows
    left = min(pl, pw)
    copy = max(0, min(w, pw - left))
    columns, row_count = _counts(k) if k.average else ("", "")
    store = ("const int32_t c = counted * cols[ox];\nout[ox] = acc / (float)(c > 0 ? c : 1);"
             if k.average else "out[ox] = acc;")
    run = ("\n    float acc_run[(BAND - 1) * PW + OW] __attribute__((aligned(64)));  /* a band's results, row ends too */"
           if k.strides == (1, 1) else "")
    row_copy, compute = _row_copy(k), _band_outputs(k, combine, row_count, store)
    text = f"""/* {kh}x{kw} {'average' if k.average else 'max'} pooling, stride {sh}x{sw}, of {h}x{w} planes (windows from \
row -{pt}, column -{pl}) into {oh}x{ow} */
static void {k.symbol}(int64_t planes, const float* restrict x, float* restrict y) {{
  enum {{ KH = {kh}, KW = {kw}, SH = {sh}, SW = {sw}, H = {h}, W = {w}, OH = {oh}, OW = {ow}, PT = {pt}, PL = {pl} }};
  /* a band: BAND output rows' windows, PROWS padded rows of PW columns, the input's at LEFT.. LEFT + COPY */
  enum {{ PW = {pw}, BAND = {band}, PROWS = (BAND - 1) * SH + KH, LEFT = {left}, COPY = {copy}, PWH = (PW + 1) / 2 }};
{columns}
#if defined(_OPENMP)
#pragma omp parallel if (planes * OH * OW * KH * KW >= {PARALLEL_MIN_WORK})
#endif
  {{
    float buf[PROWS * PW] __attribute__((aligned(64)));{run}
    for (int64_t i = 0; i < PROWS * PW; ++i) buf[i] = {neutral};
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
    for (int64_t p = 0; p < planes; ++p) {{
      const float* in = x + p * H * W;
      for (int64_t oy0 = 0; oy0 < OH; oy0 += BAND) {{
        const int64_t rows = OH - oy0 < BAND ? OH - oy0 : BAND, first = oy0 * SH - PT;  /* input row of buf's 0 */
        for (int64_t j = 0; j < (rows - 1) * SH + KH; ++j) {{
          float* dst = buf + j * PW;
          if (first + j >= 0 && first + j < H) {{
            const float* src = in + (first + j) * W;
{_indent(row_copy, 12)}
          }} else {{  /* above or below the input (the first and last bands) */
            for (int64_t i = 0; i < PW; ++i) dst[i] = {neutral};
          }}
        }}
{_indent(compute, 8)}
      }}
    }}
  }}
}}"""
    return "\n".join(line for line in text.splitlines() if line.strip())
