"""C text of the 2-d pooling kernels (`tessera.op.nn.pool_rows.Pool2dKernel`, which says why).

Every size is an enum constant of the function, so gcc unrolls the row
copies and the taps and knows each loop's trip count. Each OpenMP thread
fills its band buffer with the neutral value once; a band then copies the
input rows its windows read into the buffer's middle (rows above or below
the input are filled again), so the border needs no test. Planes are split
over the threads.
"""

from __future__ import annotations

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
    """`text` with each line but a pragma indented by `spaces` (nothing for no text)."""
    if not text:
        return ""
    return "\n".join(line if line.startswith("#") else " " * spaces + line for line in text.split("\n"))


def pool2d_source(k: Pool2dKernel) -> str:
    (kh, kw), (sh, sw), (h, w), (oh, ow), (pt, pl) = k.kernel, k.strides, k.in_size, k.out_size, k.padding
    neutral, combine = ("0.0f", "acc + v") if k.average else ("-INFINITY", "acc > v ? acc : v")
    pw, band = k.padded_width, k.band_rows
    left = min(pl, pw)
    copy = max(0, min(w, pw - left))
    columns, row_count = _counts(k) if k.average else ("", "")
    store = ("const int32_t c = counted * cols[ox];\nout[ox] = acc / (float)(c > 0 ? c : 1);"
             if k.average else "out[ox] = acc;")
    run = ""
    row_copy = "for (int64_t i = 0; i < COPY; ++i) dst[LEFT + i] = src[i];"
    if sw == 2 and not (sh == 1 and sw == 1):
        row_copy = """for (int64_t m = (LEFT + 1) / 2; 2 * m < LEFT + COPY; ++m) dst[m] = src[2 * m - LEFT];  /* even columns */
for (int64_t m = LEFT / 2; 2 * m + 1 < LEFT + COPY; ++m) dst[PWH + m] = src[2 * m + 1 - LEFT];  /* odd columns */"""
    if sh == 1 and sw == 1:
        run = "\n    float acc_run[(BAND - 1) * PW + OW] __attribute__((aligned(64)));  /* a band's results, row ends too */"
        # one flat run over the band's positions, across row ends; each row's first OW results are kept
        compute = f"""for (int64_t i = 0; i < (rows - 1) * PW + OW; ++i) {{
  float acc = buf[i];
#pragma GCC unroll {kh * kw}
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
    else:
        # stride 2 across: each band row holds its even columns, then its odd ones (from PWH), so a window's
        # taps are unit-stride runs over the outputs
        column = ("((t % KW) & 1 ? PWH : 0) + (t % KW) / 2 + ox" if sw == 2 else "ox * SW + t % KW")
        compute = f"""for (int64_t r = 0; r < rows; ++r) {{
  float* out = y + (p * OH + oy0 + r) * OW;
  const float* win = buf + r * SH * PW;{_indent(row_count, 2)}
  for (int64_t ox = 0; ox < OW; ++ox) {{
    float acc = win[{"ox" if sw == 2 else "ox * SW"}];
#pragma GCC unroll {kh * kw}
    for (int t = 1; t < KH * KW; ++t) {{
      const float v = win[(t / KW) * PW + {column}];
      acc = {combine};
    }}
{_indent(store, 4)}
  }}
}}"""
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
