"""C text of the channel-blocked depthwise kernel (`tessera.op.nn.conv_depthwise`).

`ts_depthwise2d_float32` convolves eight channels of an NCHW image at a
time with vectors across those channels: the eight channel planes are
transposed (8x8 blocks of shuffles) into a zero-padded scratch of
position vectors, every output position is then one vector accumulating
its kernel taps (eight positions per step, so eight independent chains
of multiply-adds), and the results are transposed back into the NCHW
output. The vectors are GCC vector extensions of eight floats: ymm
registers on AVX2 and AVX-512 alike (Zen 4 runs a zmm as two halves, and
eight channels waste less on odd channel counts). Taps are added in the
order kh, kw from zero, as the planar schedule adds them.

The kernel also takes an epilogue program (`tessera.te.gemm_epilogue`, as
the GEMM's fused entries do; 0 for none), so the convolution's elementwise
tail is not a second pass over the NCHW output. Bias and constant steps
(ReLU, Clip, a scale) run on the position vectors as they leave the
accumulators, a lane per channel, so a bias is one vector add; a program
with a residual (a value per element) runs whole on the channel vectors
after the transpose back. MobileNetV2's 96-channel 56x56 layer with bias
and ReLU6 took 0.87x the separate pass's time at one thread and 0.90x at
two (2-core AMD EPYC Zen 3, 10 alternating rounds); run on the channel
vectors instead, its clamps made it 1.1x slower. A map (SiLU, hard-swish:
a function of the running value, defined by the calling unit) may be the
program's last step: it runs on each band of outputs once they are stored.
On efficientnet_block (AVX2 path, 2-core Zen 4) that was even with the
separate SiLU pass, 1.04x by medians and 0.99x by best of 10 rounds.
"""

from __future__ import annotations

from ..op.nn.conv_depthwise import DEPTHWISE_BLOCK, DEPTHWISE_SYMBOL
from ..te.gemm_epilogue import MAX_CONSTANTS, MAX_OPERANDS, MAX_STEPS, STEP_BITS, Step
from .c_gemm import EPILOGUE_PARAMS


def _update(step: Step, v: str) -> str:
    """C for the value `step` (its value the vector operand_v) on the vector `v`; clamps keep v where the
    ordered compare fails, NaN too, as the tail's select does."""
    clamps = {Step.CLAMP_LT: "<", Step.CLAMP_LE: "<=", Step.CLAMP_GT: ">", Step.CLAMP_GE: ">="}
    if step in clamps:
        return (f"{{ const ts_v8si hit = {v} {clamps[step]} operand_v; "
                f"{v} = (ts_v8sf)((hit & (ts_v8si)operand_v) | (~hit & (ts_v8si){v})); }}")
    return f"{v} {'*' if step is Step.MUL_CONSTANT else '+'}= operand_v;"


_VALUE_STEPS = (Step.ADD_CONSTANT, Step.MUL_CONSTANT, Step.CLAMP_LT, Step.CLAMP_LE, Step.CLAMP_GT, Step.CLAMP_GE)


def _cases(loop: str, v: str, indent: str) -> str:
    """A switch's cases applying each value step to `v` in `loop`."""
    return "\n".join(f"{indent}case {int(step)}:  /* {step.name} */\n{indent}  {loop} {_update(step, v)}\n{indent}  break;"
                     for step in _VALUE_STEPS)


_LANE_CASES = _cases(f'_Pragma("GCC unroll {DEPTHWISE_BLOCK}") for (int32_t j = 0; j < B; ++j)', "acc[j]", " " * 10)
_CHANNEL_CASES = _cases("for (int32_t c = 0; c < channels; ++c)", "v[c]", " " * 8)

# Lane steps run on the position vectors as they leave the accumulators (a lane per channel): ADD_ROW becomes
# an add of the block's values as one vector, and every step one vector operation per position. Programs with
# a value per position or per element run on the channel vectors after the transpose back instead.
EPILOGUE_SOURCE = f"""/* the epilogue program's steps ({STEP_BITS} bits each, the first lowest: tessera.te.gemm_epilogue) as lane steps:
   kinds[s] (ADD_CONSTANT for ADD_ROW) with the vector values[s], channel c's value in lane c; none (0) when
   the program adds a value per position or per element */
static inline int32_t {DEPTHWISE_SYMBOL}_lane_steps(int32_t program, const float* const operand[{MAX_OPERANDS}],
    const float constant[{MAX_CONSTANTS}], int32_t channels, int32_t kinds[{MAX_STEPS}], ts_v8sf values[{MAX_STEPS}]) {{
  int32_t count = 0, next_operand = 0, next_constant = 0;
  for (int32_t steps = program; steps; steps >>= {STEP_BITS}) {{
    const int step = steps & {(1 << STEP_BITS) - 1};
    if (step == {int(Step.ADD_COLUMN)} || step == {int(Step.ADD_ELEMENT)}) return 0;
  }}
  for (int32_t steps = program; steps; steps >>= {STEP_BITS}, ++count) {{
    const int step = steps & {(1 << STEP_BITS) - 1};
    if (step == {int(Step.ADD_ROW)}) {{
      const float* x = operand[next_operand++];
      kinds[count] = {int(Step.ADD_CONSTANT)};
      for (int32_t c = 0; c < {DEPTHWISE_BLOCK}; ++c) values[count][c] = c < channels ? x[c] : 0.0f;
    }} else {{
      const float value = constant[next_constant++];
      kinds[count] = step;
      for (int32_t c = 0; c < {DEPTHWISE_BLOCK}; ++c) values[count][c] = value;
    }}
  }}
  return count;
}}

/* the whole program on B channel vectors v[c] of the outputs at..at + n - 1 (lanes from n on, and channels from
   `channels` on, are not stored): for programs with a value per position or per element */
static inline void {DEPTHWISE_SYMBOL}_epilogue(int32_t program, const float* const operand[{MAX_OPERANDS}],
    const float constant[{MAX_CONSTANTS}], ts_v8sf v[{DEPTHWISE_BLOCK}], int32_t channels, int32_t outputs, int32_t at,
    int32_t n) {{
  enum {{ B = {DEPTHWISE_BLOCK} }};
  int next_operand = 0, next_constant = 0;
  for (int32_t steps = program; steps; steps >>= {STEP_BITS}) {{
    const int step = steps & {(1 << STEP_BITS) - 1};
    if (step == {int(Step.ADD_ROW)}) {{  /* a value per channel (a bias) */
      const float* x = operand[next_operand++];
      for (int32_t c = 0; c < channels; ++c) v[c] += x[c];
    }} else if (step == {int(Step.ADD_COLUMN)} || step == {int(Step.ADD_ELEMENT)}) {{  /* per position, or per element */
      const float* x = operand[next_operand++] + at;
      for (int32_t c = 0; c < channels; ++c) {{
        const float* run = step == {int(Step.ADD_ELEMENT)} ? x + c * outputs : x;
        ts_v8sf operand_v;
        if (n == B) {{
          operand_v = *(const ts_v8sf_u*)run;
        }} else {{
          for (int32_t j = 0; j < B; ++j) operand_v[j] = j < n ? run[j] : 0.0f;
        }}
        v[c] += operand_v;
      }}
    }} else {{
      const float value = constant[next_constant++];
      const ts_v8sf operand_v = {{{', '.join(['value'] * DEPTHWISE_BLOCK)}}};
      switch (step) {{
{_CHANNEL_CASES}
        default: break;
      }}
    }}
  }}
}}"""

DEPTHWISE_SOURCE = EPILOGUE_SOURCE + f"""
static void {DEPTHWISE_SYMBOL}(int32_t channels, int32_t height, int32_t width,
    int32_t out_h, int32_t out_w, int32_t kernel_h, int32_t kernel_w, int32_t stride_h, int32_t stride_w,
    int32_t dilation_h, int32_t dilation_w, int32_t pad_top, int32_t pad_left, int32_t band,
    const float* x, const float* weight, float* y, {EPILOGUE_PARAMS}) {{
  enum {{ B = {DEPTHWISE_BLOCK} }};
  /* channels <= B planes of x (height x width), weight[c][kernel_h][kernel_w], y: channels planes of outputs;
     `band` output rows at a time, each band's input rows in a padded scratch of position vectors; the
     epilogue program on every run of outputs before it is stored */
  const int32_t pitch = (out_w - 1) * stride_w + (kernel_w - 1) * dilation_w + 1;
  const int32_t image = height * width, outputs = out_h * out_w, taps = kernel_h * kernel_w;
  const int32_t last = channels - 1;  /* (a short block's missing channels read this one) */
  const int32_t band_rows = (band - 1) * stride_h + (kernel_h - 1) * dilation_h + 1;
  const int32_t left = pad_left < pitch ? pad_left : pitch;
  const int32_t column_end = pad_left + width < pitch ? pad_left + width : pitch;
  ts_v8sf padded[band_rows * pitch], result[(band * out_w + B - 1) / B * B], w[taps];
  int32_t tap_offset[taps];
  const ts_v8sf zero = {{0}};
  const float* const operand[{MAX_OPERANDS}] = {{e0, e1}};
  const float constant[{MAX_CONSTANTS}] = {{f0, f1}};
  /* a map, the program's last step (tessera.te.gemm_epilogue), runs on each band's outputs once they are
     stored; the steps before it as below */
  int32_t map_at = 0;
  for (int32_t steps = program; steps && (steps & {(1 << STEP_BITS) - 1}) != {int(Step.MAP)}; steps >>= {STEP_BITS})
    map_at += {STEP_BITS};
  const int32_t has_map = (program >> map_at) != 0;
  program &= (int32_t)((1u << map_at) - 1u);
  int32_t lane_kinds[{MAX_STEPS}];
  ts_v8sf lane_values[{MAX_STEPS}];
  const int32_t lane_steps = {DEPTHWISE_SYMBOL}_lane_steps(program, operand, constant, channels, lane_kinds,
                                                           lane_values);
  const int32_t late_program = lane_steps ? 0 : program;  /* what runs after the transpose back */
  /* the weights as one vector per tap: B taps at a time transposed (the last B overlapping), else lane by lane */
  for (int32_t t = 0; t < taps; t += B) {{
    const int32_t start = taps - t < B && taps >= B ? taps - B : t;
    ts_v8sf v[B];
    if (taps >= B) {{
#pragma GCC unroll 8
      for (int32_t c = 0; c < B; ++c) v[c] = *(const ts_v8sf_u*)(weight + (c < last ? c : last) * taps + start);
      ts_transpose8_float32(v);
#pragma GCC unroll 8
      for (int32_t k = 0; k < B; ++k) w[start + k] = v[k];
    }} else {{
      for (int32_t k = 0; k < taps; ++k) {{
        for (int32_t c = 0; c < B; ++c) w[k][c] = c < channels ? weight[c * taps + k] : 0.0f;
      }}
    }}
  }}
  for (int32_t t = 0; t < taps; ++t) tap_offset[t] = t / kernel_w * dilation_h * pitch + t % kernel_w * dilation_w;
  for (int32_t first = 0; first < out_h; first += band) {{
    const int32_t count = out_h - first < band ? (out_h - first) * out_w : band * out_w;  /* the band's outputs */
    const int32_t rows = (count / out_w - 1) * stride_h + (kernel_h - 1) * dilation_h + 1;
    const int32_t row0 = first * stride_h - pad_top;  /* the image row of scratch row 0 */
    /* zero what the image does not cover */
    for (int32_t r = 0; r < rows; ++r) {{
      const int32_t inside = row0 + r >= 0 && row0 + r < height;
      for (int32_t c = 0; c < (inside ? left : pitch); ++c) padded[r * pitch + c] = zero;
      for (int32_t c = column_end; c < pitch && inside; ++c) padded[r * pitch + c] = zero;
    }}
    /* the band's image rows B positions at a time: B channel runs in, B position vectors out; a short
       last run is taken as the B positions ending the band (storing some vectors twice), and the rows
       of a last block of fewer than B channels as copies of its last channel (their lanes are unused) */
    const int32_t h_lo = row0 > 0 ? row0 : 0, h_hi = row0 + rows < height ? row0 + rows : height;
    const int32_t lo = h_lo * width, hi = h_hi * width;
    int32_t h = h_lo - row0, col = pad_left;
    for (int32_t p = lo; p < hi; p += B) {{
      const int32_t start = hi - p < B && hi - lo >= B ? hi - B : p;
      const int32_t n = hi - start < B ? hi - start : B;
      if (start != p) {{
        h = start / width - row0;
        col = start % width + pad_left;
      }}
      ts_v8sf v[B];
      if (n == B) {{  /* (straight-line: the vectors stay in registers) */
#pragma GCC unroll 8
        for (int32_t c = 0; c < B; ++c) v[c] = *(const ts_v8sf_u*)(x + (c < last ? c : last) * image + start);
      }} else {{
        for (int32_t c = 0; c < B; ++c) {{
          /* (loops to B, not to n: gcc's bounds warnings see through a variable bound) */
          for (int32_t j = 0; j < B; ++j) v[c][j] = c < channels && j < n ? x[c * image + start + j] : 0.0f;
        }}
      }}
      ts_transpose8_float32(v);
      if (n == B && col + B <= pad_left + width && col + B <= pitch) {{  /* within one row */
        ts_v8sf* row = padded + h * pitch + col;
#pragma GCC unroll 8
        for (int32_t j = 0; j < B; ++j) row[j] = v[j];
        col += B;
        if (col == pad_left + width) {{
          col = pad_left;
          ++h;
        }}
      }} else {{
        for (int32_t j = 0; j < n; ++j) {{
          if (col < pitch) padded[h * pitch + col] = v[j];
          if (++col == pad_left + width) {{
            col = pad_left;
            ++h;
          }}
        }}
      }}
    }}
    /* B output positions per step, each its own chain of multiply-adds; past the end, position 0 again */
    int32_t oy = 0, ox = 0;
    for (int32_t q = 0; q < count; q += B) {{
      const ts_v8sf* base[B];
      for (int32_t j = 0; j < B; ++j) {{
        base[j] = padded + (q + j < count ? oy * stride_h * pitch + ox * stride_w : 0);
        if (q + j < count && ++ox == out_w) {{
          ox = 0;
          ++oy;
        }}
      }}
      ts_v8sf acc[B];
#pragma GCC unroll 8
      for (int32_t j = 0; j < B; ++j) acc[j] = zero;
      for (int32_t t = 0; t < taps; ++t) {{
        const ts_v8sf tap = w[t];
        const int32_t offset = tap_offset[t];  /* (pointers plus one offset: no address sums in the loop) */
#pragma GCC unroll 8
        for (int32_t j = 0; j < B; ++j) acc[j] = acc[j] + base[j][offset] * tap;
      }}
      for (int32_t s = 0; s < lane_steps; ++s) {{
        const ts_v8sf operand_v = lane_values[s];
        switch (lane_kinds[s]) {{
{_LANE_CASES}
          default: break;
        }}
      }}
#pragma GCC unroll 8
      for (int32_t j = 0; j < B; ++j) result[q + j] = acc[j];
    }}
    /* back to planes: B position vectors in, B channel runs out (a short last run as above) */
    float* out = y + first * out_w;
    for (int32_t q = 0; q < count; q += B) {{
      const int32_t start = count - q < B && count >= B ? count - B : q;
      const int32_t n = count - start < B ? count - start : B;
      ts_v8sf v[B];
#pragma GCC unroll 8
      for (int32_t j = 0; j < B; ++j) v[j] = result[start + j];
      ts_transpose8_float32(v);
      if (late_program) {DEPTHWISE_SYMBOL}_epilogue(late_program, operand, constant, v, channels, outputs, first * out_w + start, n);
      if (n == B && channels == B) {{
#pragma GCC unroll 8
        for (int32_t c = 0; c < B; ++c) *(ts_v8sf_u*)(out + c * outputs + start) = v[c];
      }} else if (n == B) {{
        for (int32_t c = 0; c < channels; ++c) *(ts_v8sf_u*)(out + c * outputs + start) = v[c];
      }} else {{
        for (int32_t c = 0; c < channels; ++c) {{
          for (int32_t j = 0; j < B; ++j) {{
            if (j < n) out[c * outputs + start + j] = v[c][j];
          }}
        }}
      }}
    }}
    if (has_map) map(out, outputs, channels, count);
  }}
}}"""
