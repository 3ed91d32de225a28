"""C text of the packed-panel float32 GEMM (`ts_sgemm_<MR>x<NR>`, see `tessera.op.nn.gemm`).

The microkernel is written three times behind the C compiler's ISA macros:
AVX-512F intrinsics when NR is a multiple of 16, AVX2 + FMA intrinsics when
it is a multiple of 8, and plain C (which gcc vectorises for what it has)
for any other target. The schedule picks NR from the target's vector width,
so the branch compiled is the one it sized the tile for. Accumulators are
named scalars of vector type, one per (row, vector), so they stay in
registers. Same text for every target, so builds stay deterministic.
"""

from __future__ import annotations

from ..op.nn.gemm import C_BLOCK_BYTES, FUSED_SUFFIX, GemmKernel
from ..te.gemm_epilogue import MAX_CONSTANTS, MAX_OPERANDS, STEP_BITS, Step

# (C macro guard, vector type, float lanes, intrinsic prefix) per ISA, widest first
_ISAS = (
    ("defined(__AVX512F__)", "__m512", 16, "_mm512"),
    ("defined(__AVX2__) && defined(__FMA__)", "__m256", 8, "_mm256"),
)

# multiply-adds worth an OpenMP fork and join (about 1 us with the pool spinning, runtime/openmp_wait.py; an empty
# `omp parallel` took 0.9 us at 2 threads on a 2-core Zen 3). 1 << 19 against 1 << 21 at 2 threads on a Zen 3,
# two A/B runs each: vww_mobilenet 0.87 and 0.90 of the time, ic_resnet8 0.98 and 0.91, kws_ds_cnn 1.02 and 0.99;
# efficientnet, mobilenet_v2 and gpt2 blocks 0.98-1.01. Then 1 << 17 against 1 << 19 (exported-.so A/B, 10 and 16
# alternating rounds): kws_ds_cnn 0.71 and 0.83 (its 64 -> 64 pointwise layers on 125 positions are 512 Ki
# multiply-adds), vww_mobilenet 0.92 and 0.98, shufflenet 0.94 and 0.99, the rest 0.98-1.00. 1 << 16 was no
# better than 1 << 17.
PARALLEL_WORK = 1 << 17

# K steps from which a tile asks for its C rows (and an element-wise epilogue operand's) before its K loop: C's
# stores and the residual's loads missed the caches. ResNet-50's 64 -> 256 expansion at 56x56 with its residual
# add took 0.90x the time at one thread, ResNet-50 0.96x (2-core Zen 3, exported-.so A/B, 40 alternating rounds,
# medians). A short K loop does not hide the wait, and the requests are a tenth of its instructions: with them in
# every tile MobileNetV2's block (a 16 -> 96 expansion, k = 16) took 1.065x.
PREFETCH_MIN_DEPTH = 32

HEADERS_KEY = "ts_sgemm_headers"  # the helper name HEADERS is declared under in a unit (some row kernels need it too)
HEADERS = r"""#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__unix__)
#include <unistd.h>
#endif
/* the blocked loops are one function per microkernel, not inlined or specialised into every entry: gcc -O3
   compiled each unit of ResNet-50 in 2.1 s instead of 3.5 s, and the loops run once per product.
   The driver (TS_GEMM_DRIVER) is compiled at -O2: its hot code is the tile's intrinsics, which -O3 only copies
   into split and versioned loops (ResNet-50's library unit: 1.2-1.5 s of gcc against 2.9-4.0 s at -O3, the
   models' run time even). gcc inlines no function compiled under other options into it, so what the driver must
   inline is TS_GEMM_INLINE; the packing helpers stay calls, compiled with the unit's options, as does
   TS_GEMM_OUTLINED (both have scalar loops that -O3 vectorises). */
#if defined(__GNUC__) && !defined(__clang__)
#define TS_GEMM_OUTLINED __attribute__((noinline, noclone))
#define TS_GEMM_DRIVER __attribute__((noinline, noclone, optimize("O2")))
#elif defined(__GNUC__)
#define TS_GEMM_OUTLINED __attribute__((noinline))
#define TS_GEMM_DRIVER TS_GEMM_OUTLINED
#else
#define TS_GEMM_OUTLINED
#define TS_GEMM_DRIVER
#endif
#if defined(__GNUC__)
#define TS_GEMM_INLINE static inline __attribute__((always_inline))
#else
#define TS_GEMM_INLINE static inline
#endif"""
# C's block (its rows x a block of columns, kept in L2 across the K blocks) fills this share of the running
# CPU's L2, as the C library reports it. On a Zen 3 (512 KiB L2), 384 KiB against the fixed 768 KiB that suited
# a Zen 4 (1 MiB): ResNet-50 0.87-0.92x the time, VGG-19 0.89x in one A/B run and 1.02x in another, matrix
# products of 197x768x3072 and 3136x2304x256 0.95x and 0.97x. Where the size is unknown, C_BLOCK_BYTES.
L2_SHARE = (3, 4)
C_BLOCK_SOURCE = r"""/* the most of `total` (in units of `unit`, the last one short) that one of `parts` shares of whole
   units holds, the shares split as the driver splits them */
TS_GEMM_INLINE int64_t ts_sgemm_largest_share(int64_t total, int64_t unit, int64_t parts) {
  const int64_t count = (total + unit - 1) / unit;
  int64_t largest = 0;
  for (int64_t t = 0; t < parts; ++t) {
    const int64_t first = count * t / parts * unit, end = count * (t + 1) / parts * unit;
    const int64_t size = (end < total ? end : total) - first;
    largest = size > largest ? size : largest;
  }
  return largest;
}
static inline int64_t ts_sgemm_c_block_bytes(void) {
  static int64_t known;  /* every thread that finds it 0 stores the same value */
  int64_t bytes = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (!bytes) {
    long l2 = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    bytes = l2 > 0 ? (int64_t)l2 / %d * %d : %d;
    __atomic_store_n(&known, bytes, __ATOMIC_RELAXED);
  }
  return bytes;
}""" % (L2_SHARE[1], L2_SHARE[0], C_BLOCK_BYTES)


TRANSPOSE8_KEY = "ts_transpose8_float32"  # the helper name TRANSPOSE8_SOURCE is declared under in a unit
# the 8x8 transpose of GCC vectors (packing A here, the depthwise kernel's blocks): pairs of rows interleaved,
# then pairs of pairs, then the 128-bit halves swapped
TRANSPOSE8_SOURCE = """typedef float ts_v8sf __attribute__((vector_size(32)));
typedef float ts_v8sf_u __attribute__((vector_size(32), aligned(4)));
typedef int32_t ts_v8si __attribute__((vector_size(32)));
static inline void ts_transpose8_float32(ts_v8sf r[8]) {
  const ts_v8si pairs_lo = {0, 8, 1, 9, 4, 12, 5, 13}, pairs_hi = {2, 10, 3, 11, 6, 14, 7, 15};
  const ts_v8si quads_lo = {0, 1, 8, 9, 4, 5, 12, 13}, quads_hi = {2, 3, 10, 11, 6, 7, 14, 15};
  const ts_v8si halves_lo = {0, 1, 2, 3, 8, 9, 10, 11}, halves_hi = {4, 5, 6, 7, 12, 13, 14, 15};
  ts_v8sf t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(r[i], r[i + 1], pairs_lo);
    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], pairs_hi);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {  /* u[i + k]: columns k and k + 4 of rows i..i+3 */
    u[i] = __builtin_shuffle(t[i], t[i + 2], quads_lo);
    u[i + 1] = __builtin_shuffle(t[i], t[i + 2], quads_hi);
    u[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], quads_lo);
    u[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], quads_hi);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = __builtin_shuffle(u[k], u[k + 4], halves_lo);
    r[k + 4] = __builtin_shuffle(u[k], u[k + 4], halves_hi);
  }
}"""

# (the map's type written out, not a typedef: the calling units declare the entries before any helper)
EPILOGUE_PARAMS = ("int32_t program, const float* e0, const float* e1, float f0, float f1,\n"
                   "    void (*map)(float*, int64_t, int64_t, int64_t)")
EPILOGUE_KEY = "ts_sgemm_epilogue"  # the helper name EPILOGUE_SOURCE is declared under in a unit


def _epilogue_source() -> str:
    """`ts_sgemm_epilogue`, `ts_sgemm_epilogue_split` and `ts_sgemm_epilogue_apply(ep, c, ldc, i, j, mv, nv)`:
    the program's steps on the block of C at row i, column j (mv x nv), a ragged tile or any ISA's, or the
    steps from a map on (a call of the map) on a finished block of C; one pass over the block per step, whose
    row loop gcc vectorises. Whole vector tiles run the steps before a map in registers instead
    (`_vector_epilogue`)."""
    names = {step: f"TS_EPILOGUE_{step.name}" for step in Step}
    enum = ",\n       ".join(f"{names[step]} = {int(step)}" for step in Step)
    updates = {
        Step.ADD_ROW: ("const float* x = ep->operand[operand++] + i;", "row[q] += y"),
        Step.ADD_COLUMN: ("const float* x = ep->operand[operand++] + j;", "row[q] += x[q]"),
        Step.ADD_ELEMENT: ("const float* x = ep->operand[operand++] + i * ldc + j;", "row[q] += x[r * ldc + q]"),
        Step.ADD_CONSTANT: ("const float x = ep->constant[constant++];", "row[q] += x"),
        Step.MUL_CONSTANT: ("const float x = ep->constant[constant++];", "row[q] *= x"),
        **{step: ("const float x = ep->constant[constant++];", f"row[q] = row[q] {op} x ? x : row[q]")
           for step, op in ((Step.CLAMP_LT, "<"), (Step.CLAMP_LE, "<="), (Step.CLAMP_GT, ">"),
                            (Step.CLAMP_GE, ">="))},
    }
    missing = set(Step) - set(updates) - {Step.MAP}
    assert not missing, f"epilogue steps without C: {missing}"
    cases = f"      case {names[Step.MAP]}: ep->map(c, ldc, mv, nv); break;  /* a function of the kernel's unit */\n"
    cases += "\n".join(
        f"      case {names[step]}: {{\n        {take}\n        for (int64_t r = 0; r < mv; ++r) {{\n"
        f"          float* row = c + r * ldc;\n"
        + ("          const float y = x[r];  /* (row may alias x as far as gcc knows) */\n" if step is Step.ADD_ROW else "")
        + f"          for (int64_t q = 0; q < nv; ++q) {update};\n"
        f"        }}\n        break;\n      }}" for step, (take, update) in updates.items())
    return f"""/* an epilogue program: steps of {STEP_BITS} bits, the first lowest; operand steps take operand[0], then
   operand[1]; constant steps take constant[0], then constant[1] (tessera.te.gemm_epilogue) */
enum {{ {enum} }};
typedef struct {{
  int32_t program;
  const float* operand[{MAX_OPERANDS}];
  float constant[{MAX_CONSTANTS}];
  void (*map)(float* c, int64_t ldc, int64_t rows, int64_t columns);  /* the MAP step: f on each element */
}} ts_sgemm_epilogue;
/* a fused entry's program as parts[0], its steps before a map, which the tiles run (in registers), and
   parts[1], the map (which the calling unit defines) and the steps after it, which the driver runs on each
   block of C once its tiles are done, rows as long as the block's. Against the separate pass (2-core Zen 4):
   the map on each tile, its rows NR columns, took 1.05x the time of efficientnet_block and 1.10x of
   mobilenet_v3_block at one thread; the whole program on the blocks, the bias a loop of its own, 1.06x and
   1.09x at two; split so, 1.00x and 1.05x */
static inline void ts_sgemm_epilogue_split(int32_t program, const float* e0, const float* e1, float f0, float f1,
    void (*map)(float*, int64_t, int64_t, int64_t), ts_sgemm_epilogue parts[2]) {{
  const float* const operand[{MAX_OPERANDS}] = {{e0, e1}};
  const float constant[{MAX_CONSTANTS}] = {{f0, f1}};
  int shift = 0, operands = 0, constants = 0;
  for (int32_t steps = program; steps && (steps & {(1 << STEP_BITS) - 1}) != {names[Step.MAP]}; steps >>= {STEP_BITS}) {{
    const int step = steps & {(1 << STEP_BITS) - 1};
    const int takes_operand = step == {names[Step.ADD_ROW]} || step == {names[Step.ADD_COLUMN]} || step == {names[Step.ADD_ELEMENT]};
    operands += takes_operand;
    constants += !takes_operand;
    shift += {STEP_BITS};
  }}
  parts[0] = (ts_sgemm_epilogue){{program & (int32_t)((1u << shift) - 1u), {{e0, e1}}, {{f0, f1}}, 0}};
  parts[1].program = shift < 32 ? program >> shift : 0;
  for (int k = 0; k < {MAX_OPERANDS}; ++k) parts[1].operand[k] = operands + k < {MAX_OPERANDS} ? operand[operands + k] : 0;
  for (int k = 0; k < {MAX_CONSTANTS}; ++k) parts[1].constant[k] = constants + k < {MAX_CONSTANTS} ? constant[constants + k] : 0.0f;
  parts[1].map = map;
}}
/* an element-wise operand's rows for the block at row i, column j (mv x nv), asked for at the start of a tile
   whose K loop then hides the wait: read at the tile's end, a residual laid out as C missed the caches */
TS_GEMM_INLINE void ts_sgemm_epilogue_prefetch(const ts_sgemm_epilogue* ep, int64_t ldc, int64_t i, int64_t j,
    int64_t mv, int64_t nv) {{
  int operand = 0;
  for (int32_t steps = ep->program; steps; steps >>= {STEP_BITS}) {{
    const int step = steps & {(1 << STEP_BITS) - 1};
    if (step == {names[Step.ADD_ELEMENT]}) {{
      const float* x = ep->operand[operand] + i * ldc + j;
      for (int64_t r = 0; r < mv; ++r) {{
        __builtin_prefetch(x + r * ldc);
        __builtin_prefetch(x + r * ldc + nv - 1);
      }}
    }}
    operand += step == {names[Step.ADD_ROW]} || step == {names[Step.ADD_COLUMN]} || step == {names[Step.ADD_ELEMENT]};
  }}
}}
/* not inlined into the tile (which runs it on ragged tiles only): gcc compiled ResNet-50's library unit in
   3.2-3.4 s with it inlined, 1.5-2.2 s without (1.1-1.9 s before epilogues) */
TS_GEMM_OUTLINED static void ts_sgemm_epilogue_apply(const ts_sgemm_epilogue* ep, float* c, int64_t ldc, int64_t i,
    int64_t j, int64_t mv, int64_t nv) {{
  int operand = 0, constant = 0;
  for (int32_t steps = ep->program; steps; steps >>= {STEP_BITS}) {{
    switch (steps & {(1 << STEP_BITS) - 1}) {{
{cases}
      default: break;
    }}
  }}
}}"""


EPILOGUE_SOURCE = _epilogue_source()


def _vector_body(g: GemmKernel, vtype: str, lanes: int, mm: str) -> list[str]:
    nv = g.nr // lanes
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(g.mr)]
    lines = [f"  {vtype} {', '.join(f'{n} = {mm}_setzero_ps()' for n in row)};" for row in acc]

    def step(row: str, vectors: int = nv) -> list[str]:
        """One k step's multiply-adds on the first `vectors` vectors of a row of C, B's row at `row`."""
        loads = [f"      {vtype} {', '.join(f'b{v} = {mm}_loadu_ps({row} + {v * lanes})' for v in range(vectors))};"]
        return loads + [f"      {{ {vtype} x = {mm}_set1_ps(a[{r}]); "
                        + " ".join(f"{acc[r][v]} = {mm}_fmadd_ps(x, b{v}, {acc[r][v]});" for v in range(vectors))
                        + " }" for r in range(g.mr)]

    tail = _column_tail(g, vtype, lanes, mm, acc)
    lines += tail
    if nv > 1:
        # a panel of at most one vector's columns (the last of a 7x7 map's 49) multiplies that vector only:
        # MR chains of multiply-adds, 6x8 in 2/3 of a 6x16 tile's time rather than all of it
        lines += [f"  {'else if' if tail else 'if'} (!rows && nv <= {lanes})",
                  "    for (int64_t p = 0; p < kc; ++p, a += MR, b += bs) {", *step("b", 1), "    }"]
    lines += [f"  {'else if' if tail or nv > 1 else 'if'} (rows)  /* B's rows where they lie, through their offsets */",
              "    for (int64_t p = 0; p < kc; ++p, a += MR) {", "      const float* row = b + rows[p];", *step("row"),
              "    }",
              "  else",
              "    for (int64_t p = 0; p < kc; ++p, a += MR, b += bs) {", *step("b"), "    }"]
    lines += ["  if (mv == MR && nv == NR) {", "    if (add) {"]
    for r in range(g.mr):
        lines.append("      " + " ".join(
            f"{acc[r][v]} = {mm}_add_ps({acc[r][v]}, {mm}_loadu_ps(c + {r} * ldc + {v * lanes}));" for v in range(nv)))
    lines += ["    }", *_vector_epilogue(acc, vtype, lanes, mm)]
    for r in range(g.mr):
        lines.append("    " + " ".join(f"{mm}_storeu_ps(c + {r} * ldc + {v * lanes}, {acc[r][v]});" for v in range(nv)))
    lines += ["    return;", "  }", "  float t[MR * NR];"]
    lines += [f"  {mm}_storeu_ps(t + {r * g.nr + v * lanes}, {acc[r][v]});" for r in range(g.mr) for v in range(nv)]
    return lines


# Columns of a panel computed as a column of C (A's MR rows one vector, B's element a broadcast) where the panel
# has no more: the last of a 7x7 map's 49 took a fifth of such a convolution's GEMM time as a 6x8 tile, whose
# six broadcasts of A per k step bound it
COLUMN_TAIL = 2
COLUMN_PHASES = 4  # k steps in flight per column (separate accumulators: a multiply-add's latency)


def _column_tail(g: GemmKernel, vtype: str, lanes: int, mm: str, acc: list[list[str]]) -> list[str]:
    """A packed panel of at most COLUMN_TAIL columns: per k step one masked load of A's MR rows (the next step's
    rows lie past them) and a broadcast of B's element per column; then column j's lanes become the rows'
    accumulators' lane j. AVX2 only (MR fits a vector; AVX-512's 32-column panels rarely leave such a tail):
    elsewhere no lines. Opens the if/else chain of the K loops."""
    if mm != "_mm256" or g.mr > lanes:
        return []
    cols, phases = range(COLUMN_TAIL), range(COLUMN_PHASES)
    lines = [f"  if (!rows && nv <= {COLUMN_TAIL}) {{  /* a column or two: A's rows a vector (COLUMN_TAIL) */",
             "    const __m256i rows_of_a = _mm256_setr_epi32("
             + ", ".join("-1" if r < g.mr else "0" for r in range(lanes)) + ");",
             f"    {vtype} {', '.join(f's{j}_{u} = {mm}_setzero_ps()' for j in cols for u in phases)};",
             "    int64_t p = 0;",
             f"    for (; p + {COLUMN_PHASES} <= kc; p += {COLUMN_PHASES}) {{"]
    for u in phases:
        lines.append(f"      {{ const {vtype} x = _mm256_maskload_ps(a + (p + {u}) * MR, rows_of_a); "
                     + " ".join(f"s{j}_{u} = {mm}_fmadd_ps(x, {mm}_set1_ps(b[(p + {u}) * bs + {j}]), s{j}_{u});"
                                for j in cols) + " }")
    lines += ["    }", "    for (; p < kc; ++p) {",
              "      const __m256 x = _mm256_maskload_ps(a + p * MR, rows_of_a);",
              *(f"      s{j}_0 = {mm}_fmadd_ps(x, {mm}_set1_ps(b[p * bs + {j}]), s{j}_0);" for j in cols),
              "    }",
              f"    float column[{COLUMN_TAIL}][{lanes}];"]
    for j in cols:
        total = "".join(f"{mm}_add_ps(" for _ in phases[1:]) + f"s{j}_0" + "".join(f", s{j}_{u})" for u in phases[1:])
        lines.append(f"    {mm}_storeu_ps(column[{j}], {total});")
    for r in range(g.mr):
        values = [f"column[{j}][{r}]" for j in cols] + ["0.0f"] * (lanes - COLUMN_TAIL)
        lines.append(f"    {acc[r][0]} = {mm}_setr_ps({', '.join(values)});")
    return lines + ["  }"]


def _vector_epilogue(acc: list[list[str]], vtype: str, lanes: int, mm: str) -> list[str]:
    """The epilogue program's steps on a whole tile's accumulators, before they are stored (EPILOGUE_SOURCE
    says what each step does; this is the same in registers)."""
    def rows(value: str, indent: str = "          ") -> list[str]:
        """One line per row: every accumulator a = `value` (in which `{a}` is the accumulator, `{r}` its row,
        `{v}` its vector)."""
        return [indent + " ".join(f"{a} = {value.format(a=a, r=r, v=v, o=v * lanes)};" for v, a in enumerate(row))
                for r, row in enumerate(acc)]

    def clamp(predicate: str) -> str:
        if mm == "_mm512":
            return f"_mm512_mask_blend_ps(_mm512_cmp_ps_mask({{a}}, y, {predicate}), {{a}}, y)"
        return f"{mm}_blendv_ps({{a}}, y, {mm}_cmp_ps({{a}}, y, {predicate}))"

    vectors = len(acc[0])
    constant_steps = {
        Step.ADD_CONSTANT: f"{mm}_add_ps({{a}}, y)", Step.MUL_CONSTANT: f"{mm}_mul_ps({{a}}, y)",
        Step.CLAMP_LT: clamp("_CMP_LT_OQ"), Step.CLAMP_LE: clamp("_CMP_LE_OQ"),
        Step.CLAMP_GT: clamp("_CMP_GT_OQ"), Step.CLAMP_GE: clamp("_CMP_GE_OQ"),
    }
    lines = [
        "    if (ep) {  /* the last K block: the program's steps on the accumulators (ordered compares keep NaN) */",
        "      int operand = 0, constant = 0;",
        f"      for (int32_t steps = ep->program; steps; steps >>= {STEP_BITS}) {{",
        f"        const int step = steps & {(1 << STEP_BITS) - 1};",
        "        if (step == TS_EPILOGUE_ADD_ROW) {",
        "          const float* x = ep->operand[operand++] + i;",
        *[f"          {{ const {vtype} y = {mm}_set1_ps(x[{r}]); "
          + " ".join(f"{a} = {mm}_add_ps({a}, y);" for a in row) + " }" for r, row in enumerate(acc)],
        "        } else if (step == TS_EPILOGUE_ADD_COLUMN) {",
        "          const float* x = ep->operand[operand++] + j;",
        f"          const {vtype} " + ", ".join(f"y{v} = {mm}_loadu_ps(x + {v * lanes})" for v in range(vectors)) + ";",
        *rows(f"{mm}_add_ps({{a}}, y{{v}})"),
        "        } else if (step == TS_EPILOGUE_ADD_ELEMENT) {",
        "          const float* x = ep->operand[operand++] + i * ldc + j;",
        *rows(f"{mm}_add_ps({{a}}, {mm}_loadu_ps(x + {{r}} * ldc + {{o}}))"),
        "        } else {",
        f"          const {vtype} y = {mm}_set1_ps(ep->constant[constant++]);",
        "          switch (step) {",
    ]
    for step, value in constant_steps.items():
        lines += [f"          case TS_EPILOGUE_{step.name}:", *rows(value, "            "), "            break;"]
    lines += ["          default: break;", "          }", "        }", "      }", "    }"]
    return lines


def _plain_body() -> list[str]:
    return [
        "  float t[MR * NR] = {0};",
        "  for (int64_t p = 0; p < kc; ++p, a += MR) {",
        "    const float* row = rows ? b + rows[p] : b + p * bs;",
        "    for (int r = 0; r < MR; ++r)",
        "      for (int j = 0; j < NR; ++j) t[r * NR + j] += a[r] * row[j];",
        "  }",
    ]


def _ragged_store(lanes: int, vector_step: list[str]) -> list[str]:
    """A ragged tile's store from `t` (only rows < mv and columns < nv exist in C): a row's whole vectors through
    `vector_step` (the vector at column q), then its last columns one by one. Written out, because the driver's
    -O2 does not vectorise the loop (vww_mobilenet, whose channel counts leave ragged rows, took 1.02x the time)."""
    lines = ["  /* a ragged tile: only rows < mv and columns < nv exist in C */",
             "  for (int64_t r = 0; r < mv; ++r) {", "    int64_t q = 0;"]
    if lanes:
        lines += [f"    for (; q + {lanes} <= nv; q += {lanes}) {{", *(f"      {line}" for line in vector_step), "    }"]
    return lines + ["    for (; q < nv; ++q) c[r * ldc + q] = add ? c[r * ldc + q] + t[r * NR + q] : t[r * NR + q];",
                    "  }"]


def microkernel_source(g: GemmKernel) -> str:
    """`<symbol>_tile(kc, a, b, bs, rows, c, ldc, mv, nv, add, ep, i, j)`: C[:mv, :nv] (+)= A panel . B panel,
    B's row p at `b + rows[p]` where `rows` is not null (an implicit im2col read in place), else at `b + p * bs`
    (NR in a packed micro-panel, B's own row stride where it is read in place); then,
    where `ep` is not null, its program on the tile, which lies at row i, column j of the whole C."""
    lines = [f"TS_GEMM_INLINE void {g.symbol}_tile(int64_t kc, const float* restrict a, const float* restrict b,",
             "    int64_t bs, const int32_t* restrict rows, float* restrict c, int64_t ldc, int64_t mv, int64_t nv, int add,",
             "    const ts_sgemm_epilogue* ep,",
             "    int64_t i, int64_t j) {",
             f"  enum {{ MR = {g.mr}, NR = {g.nr} }};",
             f"  if (kc >= {PREFETCH_MIN_DEPTH}) {{  /* C's rows (and a residual's) asked for while the K loop runs */",
             "    if (ep) ts_sgemm_epilogue_prefetch(ep, ldc, i, j, mv, nv);",
             "    for (int64_t r = 0; r < mv; ++r) {",
             "      __builtin_prefetch(c + r * ldc, 1);",
             "      __builtin_prefetch(c + r * ldc + nv - 1, 1);",
             "    }",
             "  }"]
    isas = [isa for isa in _ISAS if g.nr % isa[2] == 0]
    for n, (guard, vtype, lanes, mm) in enumerate(isas):
        lines.append(f"#{'if' if n == 0 else 'elif'} {guard}")
        lines += _vector_body(g, vtype, lanes, mm)
        lines += _ragged_store(lanes, [f"{vtype} x = {mm}_loadu_ps(t + r * NR + q);",
                                       f"if (add) x = {mm}_add_ps(x, {mm}_loadu_ps(c + r * ldc + q));",
                                       f"{mm}_storeu_ps(c + r * ldc + q, x);"])
    lines.append("#else")
    lines += _plain_body()
    lines += _ragged_store(0, [])
    lines.append("#endif")
    lines += [
        "  if (ep) ts_sgemm_epilogue_apply(ep, c, ldc, i, j, mv, nv);",
        "}",
    ]
    return "\n".join(lines)


def _row_major_pack_a(g: GemmKernel) -> str:
    """The branch of `_pack_a` for A stored row-major (a matrix product's activations): eight k steps of the MR
    rows at a time, transposed in registers, where gcc packed one float at a time: packing A's share of ViT's
    block's samples fell from 5.1% to 3.6% (2-core Zen 3; its time 0.95-1.00x, within the machine's noise).
    Each k step's store is eight floats: the 8 - MR past its MR run into the next step's, which
    overwrites them (the driver's A buffer has eight floats of slack past its last micro-panel). AVX2 and
    MR <= 8 only: elsewhere no lines."""
    if g.mr > 8:
        return ""
    lines = ["#if defined(__AVX2__)",
             "  if (a_cs == 1 && mv == MR) {  /* A row-major: eight k steps at a time, transposed in registers */",
             "    int64_t p = 0;",
             "    for (; p + 8 <= kc; p += 8) {",
             "      ts_v8sf k[8] = {0};  /* rows from MR on stay zero */",
             *(f"      k[{r}] = *(const ts_v8sf_u*)(a + {r} * a_rs + p);" for r in range(g.mr)),
             f"      {TRANSPOSE8_KEY}(k);",
             *(f"      *(ts_v8sf_u*)(pa + (p + {j}) * MR) = k[{j}];" for j in range(8)),
             "    }",
             "    for (; p < kc; ++p)",
             "      for (int64_t r = 0; r < MR; ++r) pa[p * MR + r] = a[r * a_rs + p];",
             "    return;",
             "  }",
             "#endif"]
    return "\n".join(lines) + "\n"


# Software prefetches where the hardware's do not keep up (2-core Zen 3, one thread, exported-.so A/B, medians of
# 12-30 alternating rounds): packing B asks for each row's next panel as it copies this one (B's rows are as many
# streams as K; ResNet-50's 256 -> 64 pointwise convolution at 56x56 took 0.75-0.81x the time, the other classes
# of its convolutions even); and each tile over B panels packed at compile time (a weight too large for the caches,
# read once per block of rows) asks for its share of the next panel (ViT-B/16's block 0.87-0.97x at one thread
# and 0.90x at two, BERT's 0.94-0.95x and 0.97x; the CNNs even). On AVX-512 (32-float panels, 2-core Zen 4) it is
# even: without it ViT's block took 1.00x the time at one thread and 0.98x at two, BERT's 1.00x and 1.04x.
# Only weights larger than PREFETCH_B_MIN_BYTES: VWW's (256 KiB at most, in L2 across runs) took 1.034x the time.
PREFETCH_B_MIN_BYTES = 512 * 1024


def packing_source(g: GemmKernel) -> str:
    """`<symbol>_pack_a(mv, kc, a, a_rs, a_cs, pa)`: one MR-row micro-panel of A, `pa[p * MR + r]`;
    `<symbol>_pack_b(nv, kc, b, b_rs, b_cs, b_rows, pb)`: one NR-column micro-panel of B, `pb[p * NR + j]`, row p
    of B at `b + p * b_rs`, or at `b + b_rows[p]` where `b_rows` is not null (a convolution's implicit im2col).
    Rows r >= mv and columns j >= nv are zero, so the microkernel always runs whole tiles. `<symbol>_pack_b_panel`
    picks between `_pack_b` and `_pack_b_wrapped` for C's columns j0.. (the driver's two loop orders call it)."""
    s = g.symbol
    return f"""static inline void {s}_pack_a(int64_t mv, int64_t kc, const float* a, int64_t a_rs, int64_t a_cs,
    float* restrict pa) {{
  enum {{ MR = {g.mr} }};
  if (a_rs == 1 && mv == MR) {{  /* Aᵀ stored row-major (a pointwise convolution's input): MR-float runs */
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t r = 0; r < MR; ++r) pa[p * MR + r] = a[p * a_cs + r];
    return;
  }}
{_row_major_pack_a(g)}  for (int64_t r = 0; r < MR; ++r) {{
    const float* src = a + r * a_rs;
    if (r < mv) for (int64_t p = 0; p < kc; ++p) pa[p * MR + r] = src[p * a_cs];
    else for (int64_t p = 0; p < kc; ++p) pa[p * MR + r] = 0.0f;
  }}
}}
static inline void {s}_pack_b(int64_t nv, int64_t kc, const float* b, int64_t b_rs, int64_t b_cs,
    const int32_t* b_rows, float* restrict pb) {{
  enum {{ NR = {g.nr} }};
  for (int64_t p = 0; p < kc; ++p, pb += NR) {{
    const float* src = b_rows ? b + b_rows[p] : b + p * b_rs;
    /* (a fixed-size copy: gcc's own loop here moved 8 + 4 + 2 + 1 + 1 floats); the row's next NR floats, the
       next panel's, asked for meanwhile: each of B's rows is a stream of its own, more than the hardware's
       prefetcher follows */
    if (nv == NR && b_cs == 1) {{
      __builtin_prefetch(src + NR, 0, 2);
      memcpy(pb, src, sizeof(float) * NR);
    }}
    else for (int64_t j = 0; j < NR; ++j) pb[j] = j < nv ? src[j * b_cs] : 0.0f;
  }}
}}
static inline void {s}_pack_b_wrapped(int64_t nv, int64_t kc, const float* b, const int32_t* b_rows, int64_t j0,
    int64_t jb, int64_t width, int64_t gap, float* pb) {{
  enum {{ NR = {g.nr} }};
  const int64_t split = width - j0 % width;  /* the columns before the end of the output row */
  if (width >= NR && nv == NR) {{
    /* two runs of B's row (from B's column jb of C's j0, then from the next output row's start, `gap` further
       on), each copied NR floats long, the second over the first's excess (its own excess lands where row
       p + 1 goes, or in pb's slack) */
    for (int64_t p = 0; p < kc; ++p, pb += NR) {{
      const float* src = b + b_rows[p];
      __builtin_prefetch(src + jb + split + gap + NR, 0, 2);
      memcpy(pb, src + jb, sizeof(float) * NR);
      memcpy(pb + split, src + jb + split + gap, sizeof(float) * NR);
    }}
    return;
  }}
  /* the panel spans more rows: where each of its columns (C's j0.., output positions) lies in B */
  int64_t at[NR];
  for (int64_t j = 0; j < NR; ++j) at[j] = j < nv ? (j0 + j) + (j0 + j) / width * gap : 0;
  for (int64_t p = 0; p < kc; ++p, pb += NR) {{
    const float* src = b + b_rows[p];
    for (int64_t j = 0; j < NR; ++j) pb[j] = j < nv ? src[at[j]] : 0.0f;
  }}
}}
/* the micro-panel of C's columns j0.. (nv of them), B's rows from its row p0 on: in two runs where the panel runs
   over an output row's end (b_width, see the driver), else through B's strides or b_rows */
static inline void {s}_pack_b_panel(int64_t nv, int64_t kc, int64_t p0, const float* b, int64_t b_rs, int64_t b_cs,
    const int32_t* b_rows, int64_t j0, int64_t b_width, int64_t b_gap, float* pb) {{
  const int64_t jb = b_width ? j0 + j0 / b_width * b_gap : j0;
  if (b_width && j0 % b_width + nv > b_width)
    {s}_pack_b_wrapped(nv, kc, b, b_rows + p0, j0, jb, b_width, b_gap, pb);
  else
    {s}_pack_b(nv, kc, b + (b_rows ? 0 : p0 * b_rs) + jb * b_cs, b_rs, b_cs, b_rows ? b_rows + p0 : 0, pb);
}}"""


# Blocks of at most this many rows of C read B in place instead of packing it, where B's columns are contiguous
# and a panel is whole: packing copies all of B for only a few tiles per panel. 6x16 prepacked_a, in-process A/B
# over 15 rounds on a Zen 3: m x k x n = 24x96x3136 0.86x the time, 18x64x3136 0.80x, 12x144x784 0.71x,
# 24x576x196 0.86x; 4x16 at 16x96x3136 (mobilenet_v2_block's projection) 0.88x, but 32x64x3136 1.03x.
# A convolution's implicit im2col (the planes entry) is read in place too, its rows through their offsets:
# ic_resnet8 (16-channel 3x3s) 0.97x the time at one thread and 0.98x at two (12 rounds, medians), squeezenet
# and kws_ds_cnn unchanged. AVX-512's 32-column panels too (12x32 and 8x32, 2-core Zen 4, 10 rounds, medians):
# mobilenet_v2_block 0.96x the time at one thread and two, efficientnet_block 0.96x, mobilenet_v3_block 0.96x;
# ic_resnet8, kws_ds_cnn, vww_mobilenet and shufflenet even.
DIRECT_ROWS = 24
# K up to which a product with A packed at compile time (a convolution's weight) packs a run of B's panels first and
# sweeps them with each micro-panel of A: C's rows are then written left to right, MR at a time, where panel by panel
# (the tiles going down C's rows) every store of a shallow product went to another row of C. On a 2-core Zen 3
# (exported-.so A/B, 12 alternating rounds, medians): VGG's first convolution (3 -> 64 at 224x224, k = 27) 0.60x
# the time at one thread and 0.64x at two; ResNet-50's 64 -> 256 expansion with its residual add 0.89x at one
# thread, 1.01-1.03x at two; SqueezeNet 0.94x and 0.97x; ResNet-50, MobileNetV2's block, VWW and ic_resnet8
# 0.94-1.04x. A run of 64 KiB of panels against one filling the A buffer: even. AVX-512's 32-column panels keep
# the panel order: rows-outer there gave ResNet-50 0.99x, SqueezeNet 1.02x, mobilenet_v2_block 1.00x (one thread,
# 2-core Zen 4, 10 rounds).
ROWS_OUTER_MAX_K = 64
ROWS_OUTER_B_BYTES = 64 * 1024  # the run's B panels (in the A buffer, which is MC x KC floats: more than this)


def direct_rows(g: GemmKernel) -> int:
    """The most rows of C whose block reads B in place for microkernel `g` (0: it always packs B)."""
    return DIRECT_ROWS if g.nr in (16, 32) else 0


def rows_outer_max_k(g: GemmKernel) -> int:
    """The deepest product microkernel `g` runs rows-outer (ROWS_OUTER_MAX_K; 0: never)."""
    return ROWS_OUTER_MAX_K if g.nr == 16 else 0


def driver_source(g: GemmKernel) -> str:
    """`<symbol>_run(m, n, k, a, a_rs, a_cs, ap, b, b_rs, b_cs, b_rows, b_width, b_gap, bp, c, ldc, ep)`: the
    blocked loops around packing and tiles. B is read through its strides and packed here, or, when `bp` is not
    null, read from `bp`: B already in micro-panel order (`tessera.op.nn.gemm.pack_b_panels`, a constant
    packed at compile time), so no B packing runs at all. Likewise A from `ap` when it is not null
    (`pack_a_panels`). A block of at most `direct_rows(g)` rows of C reads whole panels of a plain B in place
    (DIRECT_ROWS). A shallow product (k up to `rows_outer_max_k(g)`) with A prepacked and B not packs a run of
    B's panels first, then runs each micro-panel of A's rows across them (ROWS_OUTER_MAX_K).
    Where `b_width` is not 0 (an implicit im2col over planes wider than the output), C's columns are rows of
    `b_width` whose B columns lie `b_gap` further apart: a panel running over a row's end is packed in two runs
    (`_pack_b_wrapped`), so C is the output itself and no column is computed twice or dropped.

    Threads split the columns of C, one contiguous share of micro-panels each, and run the whole blocked
    product on their share (each packs its own A block): one fork and one join per call, no barrier
    inside, so a thread delayed by a busy core holds up the others only once. Where a share of the rows
    is more even (few column panels: a 7x7 map's 49 columns split as 32 and 17), they split the rows of C
    instead, each packing B's panels for its own. With `bp` and no `ap` (a transposed pointwise convolution:
    positions as rows, its weight packed at compile time) rows are kept unless the columns split more evenly by
    over 1/32: by columns every thread would pack all of A. (On a 2-core Zen 3, 512->64 channels at 13x13 then
    ran in 0.85-0.88x the time at two threads, 512->128 at 28x28 0.95-0.97x.) A share whose rows of C
    exceed `ts_sgemm_c_block_bytes()` (L2_SHARE of L2) runs as even blocks of columns, each through every
    K block while its C is in L2 (A is packed again per block: m x k against m x n x k multiply-adds). Where `ep`
    is not null, it is the two parts of an epilogue program (te/gemm_epilogue.py, ts_sgemm_epilogue_split): each
    tile's last K block runs ep[0], and each block of C, once its tiles are done, ep[1]."""
    s = g.symbol
    return f"""TS_GEMM_DRIVER static void {s}_block(int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
    const float* ap, const float* b, int64_t b_rs, int64_t b_cs, const int32_t* b_rows, int64_t b_width, int64_t b_gap,
    const float* bp, float* c, int64_t ldc, const ts_sgemm_epilogue* ep, int64_t i_first, int64_t i_end,
    int64_t j_first, int64_t j_end) {{
  enum {{ MR = {g.mr}, NR = {g.nr}, KC = {g.kc}, MC = {g.mc}, DIRECT_ROWS = {direct_rows(g)},
         ROWS_OUTER_MAX_K = {rows_outer_max_k(g)}, ROWS_OUTER_B_BYTES = {ROWS_OUTER_B_BYTES},
         PREFETCH_B_MIN_BYTES = {PREFETCH_B_MIN_BYTES} }};
  const int64_t CB = ts_sgemm_c_block_bytes();
  /* the tiles run the program's steps before a map, the driver the rest on each finished block
     (ts_sgemm_epilogue_split) */
  const ts_sgemm_epilogue* tile_ep = ep && ep[0].program ? ep : 0;
  const ts_sgemm_epilogue* block_ep = ep && ep[1].program ? ep + 1 : 0;
  /* B packed at compile time and larger than an L2: its panels come from memory (PREFETCH_B_MIN_BYTES) */
  const int stream_b = bp && n * k * 4 > PREFETCH_B_MIN_BYTES;
  /* A's block: MC / MR micro-panels, and eight floats of slack (`_pack_a`'s last eight-float store) */
  float pa[MC * KC + 8] __attribute__((aligned(64)));
  /* one micro-panel of B, L1-resident across the rows, and NR floats of slack (`_pack_b_wrapped`) */
  float pb[KC * NR + NR] __attribute__((aligned(64)));
  /* blocks of A of even height (whole micro-panels): every packed B micro-panel serves as many rows */
  const int64_t m = i_end - i_first, mblocks = (m + MC - 1) / MC;
  const int64_t mstep = ((m + mblocks - 1) / mblocks + MR - 1) / MR * MR;
  /* C's block (mstep x nc) stays in L2 across the K blocks: the columns in even blocks of whole micro-panels */
  const int64_t share = j_end - j_first, cbytes = mstep * share * 4;
  const int64_t cblocks = cbytes > CB ? (cbytes + CB - 1) / CB : 1;
  const int64_t nc = ((share + cblocks - 1) / cblocks + NR - 1) / NR * NR;
  /* a shallow product with A packed at compile time: a run of B's panels packed first (into pa, unused), then each
     micro-panel of A's rows sweeps them, so C's rows are written MR at a time left to right (one tile call site:
     a second copy of the inlined tile cost gcc a second on ResNet-50's library unit) */
  const int rows_outer = ap && !bp && k <= ROWS_OUTER_MAX_K && m > DIRECT_ROWS;
  const int64_t run = (ROWS_OUTER_B_BYTES / 4 / (k > 0 ? k : 1)) / NR * NR;  /* columns whose panels share L2 */
  const int64_t nstep = rows_outer && run < nc ? run : nc;
  for (int64_t jc = j_first; jc < j_end; jc += nstep) {{
    const int64_t jc_end = j_end - jc < nstep ? j_end : jc + nstep;
    const int64_t panels = (jc_end - jc + NR - 1) / NR;
    /* (k <= KC: one K block) each panel k x NR floats, and NR of slack overwritten by the next */
    for (int64_t j0 = jc; rows_outer && j0 < jc_end; j0 += NR)
      {s}_pack_b_panel(n - j0 < NR ? n - j0 : NR, k, 0, b, b_rs, b_cs, b_rows, j0, b_width, b_gap, pa + (j0 - jc) * k);
    for (int64_t p0 = 0; p0 < k; p0 += KC) {{
      const int64_t kc = k - p0 < KC ? k - p0 : KC;
      for (int64_t i0 = i_first; i0 < i_end; i0 += mstep) {{
        const int64_t mc = i_end - i0 < mstep ? i_end - i0 : mstep, tiles = (mc + MR - 1) / MR;
        if (!ap)
          for (int64_t ir = 0; ir < mc; ir += MR)
            {s}_pack_a(mc - ir < MR ? mc - ir : MR, kc, a + (i0 + ir) * a_rs + p0 * a_cs, a_rs, a_cs, pa + ir * kc);
        /* prepacked: micro-panel (i0 + ir) / MR is k x MR floats, its rows p0.. a contiguous KC x MR block */
        const float* apanels = ap ? ap + i0 * k + p0 * MR : pa;
        const int64_t astep = ap ? k : kc;
        /* panel by panel of B, each through every micro-panel of A; rows-outer, the other way round */
        for (int64_t u = 0; u < (rows_outer ? tiles : panels); ++u) {{
          const float* panel = pa;
          int64_t bs = NR;
          const int32_t* rows = 0;
          if (!rows_outer) {{
            const int64_t j0 = jc + u * NR, nv = n - j0 < NR ? n - j0 : NR;
            /* B's column of C's column j0: with b_width, C's rows of b_width columns lie b_gap columns apart in B */
            const int64_t jb = b_width ? j0 + j0 / b_width * b_gap : j0;
            const int wrapped = b_width && j0 % b_width + nv > b_width;  /* the panel runs into the next row */
            /* prepacked: micro-panel j0 / NR is k x NR floats, its rows p0.. a contiguous KC x NR block */
            /* few rows of C: B's rows are read where they are (through b_rows for an implicit im2col), a whole
               panel of contiguous columns at a time */
            const int direct = DIRECT_ROWS > 0 && !bp && b_cs == 1 && nv == NR && mc <= DIRECT_ROWS && !wrapped;
            panel = bp ? bp + j0 * k + p0 * NR : direct ? b + (b_rows ? 0 : p0 * b_rs) + jb : pb;
            if (!bp && !direct)
              {s}_pack_b_panel(nv, kc, p0, b, b_rs, b_cs, b_rows, j0, b_width, b_gap, pb);
            bs = direct ? b_rs : NR;
            rows = direct && b_rows ? b_rows + p0 : 0;
          }}
          for (int64_t w = 0; w < (rows_outer ? panels : tiles); ++w) {{
            const int64_t j0 = jc + (rows_outer ? w : u) * NR, ir = (rows_outer ? u : w) * MR;
            const int64_t nv = n - j0 < NR ? n - j0 : NR, mv = mc - ir < MR ? mc - ir : MR;
            float* tile = c + (i0 + ir) * ldc + j0;
            if (stream_b && u + 1 < panels) {{
              /* B packed at compile time comes from memory: each tile asks for its share of the next panel */
              const char* next = (const char*)(bp + (j0 + NR) * k + p0 * NR);
              const int64_t bytes = kc * NR * 4, share = (bytes / tiles + 63) / 64 * 64;
              for (int64_t at = w * share; at < bytes && at < (w + 1) * share; at += 64)
                __builtin_prefetch(next + at, 0, 2);
            }}
            {s}_tile(kc, apanels + ir * astep, rows_outer ? pa + (j0 - jc) * k : panel, bs, rows, tile, ldc, mv, nv,
                     p0 > 0, p0 + kc == k ? tile_ep : 0, i0 + ir, j0);
          }}
        }}
        if (block_ep && p0 + kc == k)  /* the block's C is done and in L2 */
          ts_sgemm_epilogue_apply(block_ep, c + i0 * ldc + jc, ldc, i0, jc, mc, jc_end - jc);
      }}
    }}
  }}
}}
TS_GEMM_DRIVER static void {s}_run(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
    const float* ap, const float* b, int64_t b_rs, int64_t b_cs, const int32_t* b_rows, int64_t b_width,
    int64_t b_gap, const float* bp, float* c, int64_t ldc, const ts_sgemm_epilogue* ep) {{
#if defined(_OPENMP)
  enum {{ MR = {g.mr}, NR = {g.nr} }};
  const int64_t panels = (n + NR - 1) / NR, row_panels = (m + MR - 1) / MR;
  if (m * n * k >= {PARALLEL_WORK} && (panels > 1 || row_panels > 1) && omp_get_max_threads() > 1
      && !omp_in_parallel()) {{
#pragma omp parallel
    {{
      const int64_t parts = omp_get_num_threads(), t = omp_get_thread_num();
      /* the largest share of the columns (and of the rows), as a fraction of n (of m): by rows where that is
         smaller by more than 1/32 (each thread then packs all of B), or, when B was packed at compile time and
         A is not, unless it is larger by more than 1/32 (by columns, each thread would pack all of A) */
      const int64_t widest = ts_sgemm_largest_share(n, NR, parts), tallest = ts_sgemm_largest_share(m, MR, parts);
      const int packs_a_only = bp && !ap;
      if (packs_a_only ? tallest * n * 31 <= widest * m * 32 : tallest * n * 32 < widest * m * 31) {{
        const int64_t first = row_panels * t / parts * MR, end = row_panels * (t + 1) / parts * MR;
        {s}_block(n, k, a, a_rs, a_cs, ap, b, b_rs, b_cs, b_rows, b_width, b_gap, bp, c, ldc, ep, first,
                  end < m ? end : m, 0, n);
      }} else {{
        const int64_t first = panels * t / parts * NR, end = panels * (t + 1) / parts * NR;
        {s}_block(n, k, a, a_rs, a_cs, ap, b, b_rs, b_cs, b_rows, b_width, b_gap, bp, c, ldc, ep, 0, m, first,
                  end < n ? end : n);
      }}
    }}
    return;
  }}
#endif
  {s}_block(n, k, a, a_rs, a_cs, ap, b, b_rs, b_cs, b_rows, b_width, b_gap, bp, c, ldc, ep, 0, m, 0, n);
}}"""


def _entry_parts(g: GemmKernel) -> dict[str, tuple[str, str, str]]:
    """Each plain entry's (parameters, statements before the product, the driver's arguments up to `c, ldc`)."""
    planes_prelude = f"""  /* row p = (channel, tap) of the implicit im2col matrix: the tap's shift in its stride phase's plane
     (phases_h is sh, or 1 where every tap reads phase 0 and only that one was copied; so phases_w)
     (a variable-length array: k * 4 bytes of stack, 18 KiB for 512 channels x 3 x 3) */
  const int64_t k = channels * kh * kw, plane = rows * pitch;
  int32_t b_rows[k];
  for (int64_t ch = 0, p = 0; ch < channels; ++ch)
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j, ++p)
        b_rows[p] = (int32_t)(((ch * phases_h + i * dh % sh) * phases_w + j * dw % sw) * plane + i * dh / sh * pitch
                              + j * dw / sw);
"""
    return {
        g.symbol: ("int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,\n    const float* b, "
                   "int64_t b_rs, int64_t b_cs, float* c, int64_t ldc", "",
                   "m, n, k, a, a_rs, a_cs, 0, b, b_rs, b_cs, 0, 0, 0, 0, c, ldc"),
        g.prepacked_symbol: ("int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs,\n    int64_t a_cs, "
                             "const float* bp, float* c, int64_t ldc", "",
                             "m, n, k, a, a_rs, a_cs, 0, 0, 0, 0, 0, 0, 0, bp, c, ldc"),
        g.prepacked_a_symbol: ("int64_t m, int64_t n, int64_t k, const float* ap, const float* b,\n    int64_t b_rs, "
                               "int64_t b_cs, float* c, int64_t ldc", "",
                               "m, n, k, 0, 0, 0, ap, b, b_rs, b_cs, 0, 0, 0, 0, c, ldc"),
        g.planes_symbol: ("int64_t m, int64_t n, const float* ap, const float* x, int64_t channels,\n    int64_t kh, "
                          "int64_t kw, int64_t dh, int64_t dw, int64_t sh, int64_t sw, int64_t phases_h, int64_t phases_w,"
                          "\n    int64_t rows, int64_t pitch, int64_t width, float* c, int64_t ldc", planes_prelude,
                          "m, n, k, 0, 0, 0, ap, x, 0, 1, b_rows, width < pitch ? width : 0, pitch - width, 0, c, ldc"),
    }


def entry_source(g: GemmKernel, entry: str) -> str:
    """The function a kernel calls, `entry` one of eight: `<symbol>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c,
    ldc)` packs both operands as it goes; `<symbol>_prepacked(m, n, k, a, a_rs, a_cs, bp, c, ldc)` reads B
    from micro-panels packed at compile time; `<symbol>_prepacked_a(m, n, k, ap, b, b_rs, b_cs, c, ldc)`
    reads A so (`tessera.op.nn.conv_gemm.pack_a_panels`: a pointwise convolution's weights);
    `<symbol>_planes(m, n, ap, x, channels, kh, kw, dh, dw, sh, sw, phases_h, phases_w, rows, pitch, width, c,
    ldc)` reads A so and B as the implicit im2col matrix of padded stride-phase planes `x`
    (`tessera.op.nn.conv_planes_gemm`), C's columns the output's positions, `width` to a row, where the planes'
    rows are `pitch` wide; and each of those with `_fused` and EPILOGUE_PARAMS after `ldc`
    runs an epilogue program on every finished tile (`tessera.te.gemm_epilogue`). Each is its own helper: a
    unit that defines the GEMM inline defines only the entries it calls (-Wall: no unused statics); a library
    unit defines all eight (c_library)."""
    fused = entry.endswith(FUSED_SUFFIX)
    plain = entry[:-len(FUSED_SUFFIX)] if fused else entry
    parts = _entry_parts(g).get(plain)
    if parts is None:
        raise ValueError(f"{entry} is no entry of the {g.mr}x{g.nr} GEMM microkernel")
    params, prelude, arguments = parts
    if not fused:
        return f"static void {entry}({params}) {{\n{prelude}  {g.symbol}_run({arguments}, 0);\n}}"
    return (f"static void {entry}({params},\n    {EPILOGUE_PARAMS}) {{\n{prelude}"
            f"  ts_sgemm_epilogue ep[2];\n"
            f"  ts_sgemm_epilogue_split(program, e0, e1, f0, f1, map, ep);\n"
            f"  {g.symbol}_run({arguments}, ep);\n}}")


def gemm_source(g: GemmKernel) -> str:
    """The microkernel, packing and driver (no entry), for a translation unit that already includes HEADERS,
    C_BLOCK_SOURCE and TRANSPOSE8_SOURCE."""
    return "\n".join((microkernel_source(g), packing_source(g), driver_source(g)))
