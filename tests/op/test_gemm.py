"""The packed-panel GEMM microkernel (op/nn/gemm.py, codegen/c_gemm.py): its C compiled on its own for each
ISA branch (plain C, AVX2 + FMA, AVX-512) against NumPy, its packed layouts, and matmul / dense built by
tessera for x86-64-v3 and this CPU, with ragged edges, broadcast batches and transposed operands."""

from __future__ import annotations

import ctypes
import platform
import subprocess

import numpy as np
import pytest

import tessera
from tessera.codegen.c_library import LIBRARY_MACRO
from tessera import relay
from tessera.codegen.c_gemm import (C_BLOCK_SOURCE, DIRECT_ROWS, EPILOGUE_SOURCE, HEADERS, TRANSPOSE8_SOURCE,
                                   entry_source, gemm_source)
from tessera.op import elemwise, elemwise_activation, transform
from tessera.op.nn import matmul
from tessera.op.nn.gemm import (KC_MAX, KERNELS_BY_LANES, L1_PANEL_BYTES, L2_BLOCK_BYTES, GemmKernel, choose_kernel,
                                fused, pack_a_panels, pack_b_panels, unpack_b_panels)
from tessera.te.gemm_epilogue import STEP_BITS, Step
from tessera.op.schedule_context import ScheduleContext
from tessera.target import Target
from tessera.testing.isa import require_level

X86 = platform.machine() == "x86_64"
KERNELS = sorted({g for kernels in KERNELS_BY_LANES.values() for g in kernels}, key=lambda g: (g.nr, g.mr))
# the -march of each branch of the microkernel: x86-64 (SSE2 only) compiles the plain C one
BRANCHES = {"plain": "x86-64", "avx2": "x86-64-v3", "avx512": "x86-64-v4"}
# (m, n, k): ragged against every tile, one K block and several, one M block (MC) and several, one block of
# columns (C_BLOCK_BYTES) and two, DIRECT_ROWS rows (B read in place where its columns are contiguous) and one more,
# last rows of every count below MR (6x16's remainder tile: 4 rows whole and ragged, 2 rows)
SHAPES = [(1, 1, 1), (5, 17, 5), (17, 5, 771), (197, 771, 17), (13, 33, 300), (600, 40, 260), (197, 1100, 40),
          (DIRECT_ROWS, 50, 300), (DIRECT_ROWS + 1, 50, 40), (16, 48, 300), (15, 33, 20), (20, 64, 9)]

WRAPPERS = r"""
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
          int64_t b_rs, int64_t b_cs, float* c, int64_t ldc) { SYM(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc); }
void gemm_prepacked(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
                    const float* bp, float* c, int64_t ldc) { SYM_prepacked(m, n, k, a, a_rs, a_cs, bp, c, ldc); }
void gemm_prepacked_a(int64_t m, int64_t n, int64_t k, const float* ap, const float* b, int64_t b_rs, int64_t b_cs,
                      float* c, int64_t ldc) { SYM_prepacked_a(m, n, k, ap, b, b_rs, b_cs, c, ldc); }
/* the MAP step's function in these tests: v * v on every element of a block */
static void square_map(float* c, int64_t ldc, int64_t rows, int64_t columns) {
  for (int64_t r = 0; r < rows; ++r, c += ldc)
    for (int64_t q = 0; q < columns; ++q) c[q] = c[q] * c[q];
}
void gemm_fused(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, int32_t program, const float* e0, const float* e1,
                float f0, float f1) {
  SYM_fused(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, program, e0, e1, f0, f1, square_map); }
void pack_a(int64_t mv, int64_t kc, const float* a, int64_t a_rs, int64_t a_cs, float* pa) {
  SYM_pack_a(mv, kc, a, a_rs, a_cs, pa); }
void pack_b(int64_t nv, int64_t kc, const float* b, int64_t b_rs, int64_t b_cs, float* pb) {
  SYM_pack_b(nv, kc, b, b_rs, b_cs, 0, pb); }
"""


def kernel_source(g: GemmKernel, entries) -> str:
    """A unit defining `g`'s microkernel, packing, driver and the named entries."""
    return "\n".join(("#include <stdint.h>", HEADERS, C_BLOCK_SOURCE, EPILOGUE_SOURCE, TRANSPOSE8_SOURCE,
                      gemm_source(g), *(entry_source(g, e) for e in entries)))


def compile_kernel(g: GemmKernel, branch: str, tmp_path, openmp: bool = False) -> ctypes.CDLL:
    if branch != "plain":
        require_level(BRANCHES[branch])
    source = kernel_source(g, (g.symbol, g.prepacked_symbol, g.prepacked_a_symbol, fused(g.symbol)))
    source += "\n" + WRAPPERS.replace("SYM", g.symbol)
    if openmp:
        source += "void set_threads(int n) { omp_set_num_threads(n); }\n"
    (tmp_path / "gemm.c").write_text(source)
    march = [f"-march={BRANCHES[branch]}"] if X86 else []
    march += ["-fopenmp"] if openmp else []
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-shared", "-fPIC", "-Wall", "-Werror", *march, "-o",
                    str(tmp_path / "gemm.so"), str(tmp_path / "gemm.c")], check=True)
    lib = ctypes.CDLL(str(tmp_path / "gemm.so"))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.gemm.argtypes = [i64, i64, i64, ptr, i64, i64, ptr, i64, i64, ptr, i64]
    lib.gemm_prepacked.argtypes = [i64, i64, i64, ptr, i64, i64, ptr, ptr, i64]
    lib.gemm_prepacked_a.argtypes = [i64, i64, i64, ptr, ptr, i64, i64, ptr, i64]
    f32 = ctypes.c_float
    lib.gemm_fused.argtypes = [i64, i64, i64, ptr, i64, i64, ptr, i64, i64, ptr, i64, ctypes.c_int32, ptr, ptr, f32, f32]
    lib.pack_a.argtypes = lib.pack_b.argtypes = [i64, i64, ptr, i64, i64, ptr]
    return lib


@pytest.mark.skipif(not X86, reason="x86 ISA levels")
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_every_branch_compiles_warning_free_on_any_x86_host(kernel, tmp_path):
    """Each ISA branch of every microkernel and entry, the fused and planes ones included, compiles under -Wall
    -Werror for its -march, with OpenMP: also the AVX-512 text, which an AVX2-only CPU cannot run."""
    (tmp_path / "gemm.c").write_text(kernel_source(kernel, kernel.entries))
    for march in BRANCHES.values():
        subprocess.run(["gcc", "-O2", "-std=gnu11", "-c", "-fPIC", "-Wall", "-Werror", "-Wno-unused-function",
                        f"-march={march}", "-fopenmp", "-o", str(tmp_path / "gemm.o"), str(tmp_path / "gemm.c")],
                       check=True)


def addr(x: np.ndarray) -> int:
    return x.ctypes.data


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_kernel_matches_numpy_on_ragged_and_transposed_operands(kernel, branch, tmp_path):
    lib = compile_kernel(kernel, branch, tmp_path)
    rng = np.random.default_rng(0)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        want = a.astype(np.float64) @ b
        tol = 1e-5 * np.sqrt(k) * 4
        c = np.full((m, n + 3), np.nan, np.float32)  # ldc wider than n: the extra columns stay untouched
        lib.gemm(m, n, k, addr(a), k, 1, addr(b), n, 1, addr(c), n + 3)
        np.testing.assert_allclose(c[:, :n], want, rtol=tol, atol=tol, err_msg=f"{(m, n, k)}")
        assert np.isnan(c[:, n:]).all()
        # transposes are strides: Aᵀ stored (k, m), Bᵀ stored (n, k), as dense's weight and attention's Kᵀ
        at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
        c = np.zeros((m, n), np.float32)
        lib.gemm(m, n, k, addr(at), 1, m, addr(bt), 1, k, addr(c), n)
        np.testing.assert_allclose(c, want, rtol=tol, atol=tol, err_msg=f"transposed {(m, n, k)}")


# epilogue programs: (steps, operands by kind, constants), each checked against NumPy's float32 on the product
EPILOGUES = [
    ((Step.ADD_ROW, Step.CLAMP_LT), ("row",), (0.0,)),  # a convolution's bias and ReLU
    ((Step.ADD_ROW, Step.CLAMP_LE, Step.CLAMP_GE), ("row",), (0.0, 6.0)),  # ReLU6
    ((Step.ADD_ROW, Step.ADD_ELEMENT, Step.CLAMP_LT), ("row", "element"), (0.0,)),  # residual block
    ((Step.ADD_COLUMN, Step.ADD_ELEMENT), ("column", "element"), ()),  # a dense layer's bias and residual
    ((Step.ADD_CONSTANT, Step.CLAMP_GE), (), (0.5, 1.0)),
    ((Step.MUL_CONSTANT, Step.CLAMP_GT), (), (0.125, 0.25)),
    # products times 0 are signed zeros: each clamp tells a tie (its bound, +0) from a miss (-0 kept)
    *(((Step.MUL_CONSTANT, clamp), (), (0.0, 0.0)) for clamp in (Step.CLAMP_LT, Step.CLAMP_LE, Step.CLAMP_GT, Step.CLAMP_GE)),
    # a map (the wrapper's square_map) between steps: the tiles run the steps before it in registers, the
    # driver the map and the steps after it on each finished block of C (ts_sgemm_epilogue_split)
    ((Step.ADD_ROW, Step.MAP, Step.ADD_ELEMENT, Step.CLAMP_LT), ("row", "element"), (0.0,)),
    ((Step.MAP,), (), ()),
]
_NUMPY_STEPS = {
    Step.ADD_ROW: lambda v, x: v + x[:, None], Step.ADD_COLUMN: lambda v, x: v + x[None, :],
    Step.ADD_ELEMENT: lambda v, x: v + x, Step.ADD_CONSTANT: lambda v, x: v + x, Step.MUL_CONSTANT: lambda v, x: v * x,
    Step.CLAMP_LT: lambda v, x: np.where(v < x, x, v), Step.CLAMP_LE: lambda v, x: np.where(v <= x, x, v),
    Step.CLAMP_GT: lambda v, x: np.where(v > x, x, v), Step.CLAMP_GE: lambda v, x: np.where(v >= x, x, v),
    Step.MAP: lambda v, x: v * v,
}


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_fused_entry_runs_the_epilogue_program_on_every_tile(kernel, branch, tmp_path):
    """`<symbol>_fused` computes the product and then each step in order, bit for bit what NumPy's float32 gives
    on the plain entry's product: whole tiles (in registers) and ragged ones, every K block count, NaN kept by
    the clamps, and nothing written past n (C's leading dimension is n + 3, as is the element operand's)."""
    lib = compile_kernel(kernel, branch, tmp_path)
    rng = np.random.default_rng(11)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        product = np.full((m, n + 3), np.nan, np.float32)
        lib.gemm(m, n, k, addr(a), k, 1, addr(b), n, 1, addr(product), n + 3)
        for steps, kinds, constants in EPILOGUES:
            operands = {"row": rng.standard_normal(m, dtype=np.float32),
                        "column": rng.standard_normal(n, dtype=np.float32),
                        "element": rng.standard_normal((m, n + 3), dtype=np.float32)}
            operands["element"][0, :4] = [np.nan, -np.inf, np.inf, -0.0][: min(n + 3, 4)]  # through to the clamps
            want = product[:, :n].copy()
            got = np.full((m, n + 3), np.nan, np.float32)
            args = [operands[kind] for kind in kinds]
            want_operands, constant_values = iter(args), iter(np.float32(c) for c in constants)
            for step in steps:
                x = next(want_operands)[:, :n] if step is Step.ADD_ELEMENT else (
                    next(want_operands) if step in (Step.ADD_ROW, Step.ADD_COLUMN) else
                    None if step is Step.MAP else next(constant_values))
                want = _NUMPY_STEPS[step](want, x).astype(np.float32)
            program = sum(int(step) << (STEP_BITS * i) for i, step in enumerate(steps))
            pointers = [addr(x) for x in args] + [0] * (2 - len(args))
            values = [*constants, 0.0, 0.0][:2]
            lib.gemm_fused(m, n, k, addr(a), k, 1, addr(b), n, 1, addr(got), n + 3, program, *pointers, *values)
            same = (got[:, :n].view(np.uint32) == want.view(np.uint32)) | (np.isnan(got[:, :n]) & np.isnan(want))
            assert same.all(), f"{(m, n, k)} {steps}: {np.argwhere(~same)[:3]}"  # bit for bit: signed zeros too
            assert np.isnan(got[:, n:]).all()


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_prepacked_entry_reads_b_from_compile_time_panels(kernel, branch, tmp_path):
    """`<symbol>_prepacked` on `pack_b_panels(B, NR)` computes what `<symbol>` computes on B, bit for bit
    (the same panels reach the same tiles), for A plain and transposed."""
    lib = compile_kernel(kernel, branch, tmp_path)
    rng = np.random.default_rng(5)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        bp = pack_b_panels(b, kernel.nr)
        want = np.full((m, n + 3), np.nan, np.float32)
        lib.gemm(m, n, k, addr(a), k, 1, addr(b), n, 1, addr(want), n + 3)
        got = np.full((m, n + 3), np.nan, np.float32)
        lib.gemm_prepacked(m, n, k, addr(a), k, 1, addr(bp), addr(got), n + 3)
        np.testing.assert_array_equal(got, want, err_msg=f"{(m, n, k)}")  # columns past n stay NaN in both
        at = np.ascontiguousarray(a.T)
        got = np.zeros((m, n), np.float32)
        lib.gemm_prepacked(m, n, k, addr(at), 1, m, addr(bp), addr(got), n)
        np.testing.assert_array_equal(got, want[:, :n], err_msg=f"A transposed {(m, n, k)}")


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_prepacked_a_entry_reads_a_from_compile_time_panels(kernel, branch, tmp_path):
    """`<symbol>_prepacked_a` on `pack_a_panels(A, MR)` computes what `<symbol>` computes on A, bit for bit,
    for B plain and transposed (a pointwise convolution's weights are A; its input channels are B)."""
    lib = compile_kernel(kernel, branch, tmp_path)
    rng = np.random.default_rng(7)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        ap = pack_a_panels(a, kernel.mr)
        want = np.full((m, n + 3), np.nan, np.float32)
        lib.gemm(m, n, k, addr(a), k, 1, addr(b), n, 1, addr(want), n + 3)
        got = np.full((m, n + 3), np.nan, np.float32)
        lib.gemm_prepacked_a(m, n, k, addr(ap), addr(b), n, 1, addr(got), n + 3)
        np.testing.assert_array_equal(got, want, err_msg=f"{(m, n, k)}")
        bt = np.ascontiguousarray(b.T)
        got = np.zeros((m, n), np.float32)
        lib.gemm_prepacked_a(m, n, k, addr(ap), addr(bt), 1, k, addr(got), n)
        np.testing.assert_array_equal(got, want[:, :n], err_msg=f"B transposed {(m, n, k)}")


@pytest.mark.parametrize("branch", ["plain", "avx2"])
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_compile_time_a_panels_equal_the_run_time_packing(kernel, branch, tmp_path):
    """pack_a_panels(A, MR)[i, p0:p0 + kc] is exactly what `_pack_a` packs at run time for micro-panel i and
    K block p0 (zero past the last row), on the plain branch and on AVX2's, which packs a row-major A eight K
    steps at a time (K blocks of fewer, exactly eight and more, with and without a remainder) and may write up to
    eight floats past the panel (the driver's A buffer has that slack)."""
    lib = compile_kernel(kernel, branch, tmp_path)
    mr = kernel.mr
    rng = np.random.default_rng(8)
    for m, k in [(mr, 7), (mr, 8), (mr, 16), (mr + 1, 23), (2 * mr + 3, kernel.kc + 5), (1, 3)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        ap = pack_a_panels(a, mr)
        assert ap.shape == (-(-m // mr), k, mr) and ap.flags.c_contiguous
        for i in range(ap.shape[0]):
            for p0 in range(0, k, kernel.kc):
                kc = min(kernel.kc, k - p0)
                pa = np.full(kc * mr + 8, np.nan, np.float32)
                lib.pack_a(min(mr, m - i * mr), kc, addr(a[i * mr:, p0:]), k, 1, addr(pa))
                np.testing.assert_array_equal(pa[:kc * mr].reshape(kc, mr), ap[i, p0:p0 + kc],
                                              err_msg=f"{(m, k, i, p0)}")


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_compile_time_panels_equal_the_run_time_packing(kernel, tmp_path):
    """pack_b_panels(B, NR)[j, p0:p0 + kc] is exactly what `_pack_b` packs at run time for micro-panel j
    and K block p0 (zero past the last column), and unpack_b_panels inverts it."""
    lib = compile_kernel(kernel, "plain", tmp_path)
    nr = kernel.nr
    rng = np.random.default_rng(6)
    for k, n in [(7, nr), (kernel.kc + 5, 2 * nr + 3), (3, 1)]:
        b = rng.standard_normal((k, n), dtype=np.float32)
        bp = pack_b_panels(b, nr)
        assert bp.shape == (-(-n // nr), k, nr) and bp.flags.c_contiguous
        np.testing.assert_array_equal(unpack_b_panels(bp, n), b)
        for j in range(bp.shape[0]):
            for p0 in range(0, k, kernel.kc):
                kc = min(kernel.kc, k - p0)
                pb = np.full(kc * nr, np.nan, np.float32)
                lib.pack_b(min(nr, n - j * nr), kc, addr(b[p0:, j * nr:]), n, 1, addr(pb))
                np.testing.assert_array_equal(bp[j, p0:p0 + kc].ravel(), pb, err_msg=f"{(k, n, j, p0)}")


@pytest.mark.parametrize("branch", ["plain", "avx2"])
@pytest.mark.parametrize("threads", [2, 3])
def test_threads_split_the_columns_or_rows_and_compute_the_same_bits(threads, branch, tmp_path):
    """With OpenMP, a large product runs as one share of B's micro-panels per thread (uneven shares too), or,
    where few column panels would split unevenly, one share of A's: (64, 17, 2100) and (600, 40, 260) split
    their rows, a 7x7 map's (512, 49, 300) too. With B packed at compile time (the prepacked entry) rows also
    win near-ties, so each thread packs only its rows of A: (169, 64, 300) and (784, 128, 40) split their rows
    there and their columns in the plain entry. Each element is the same tile's at any thread count."""
    lib = compile_kernel(GemmKernel(6, 16), branch, tmp_path, openmp=True)
    rng = np.random.default_rng(3)
    for m, n, k in [(197, 771, 17), (600, 40, 260), (64, 17, 2100), (9, 13, 5), (250, 3000, 8), (512, 49, 300),
                    (169, 64, 300), (784, 128, 40)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.full((m, n), np.nan, np.float32)
        lib.set_threads(threads)
        lib.gemm(m, n, k, addr(a), k, 1, addr(b), n, 1, addr(c), n)
        tol = 4e-5 * np.sqrt(k)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=tol, atol=tol, err_msg=f"{(m, n, k)}")
        packed, bp = np.full((m, n), np.nan, np.float32), pack_b_panels(b, 16)  # (bp kept alive for the call)
        lib.gemm_prepacked(m, n, k, addr(a), k, 1, addr(bp), addr(packed), n)
        np.testing.assert_array_equal(packed, c, err_msg=f"prepacked {(m, n, k)}")
        alone = np.full((m, n), np.nan, np.float32)
        lib.set_threads(1)
        lib.gemm(m, n, k, addr(a), k, 1, addr(b), n, 1, addr(alone), n)
        np.testing.assert_array_equal(c, alone, err_msg=f"{threads} threads against one {(m, n, k)}")


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda g: g.symbol)
def test_packed_panels_are_k_major_and_zero_padded(kernel, tmp_path):
    """A micro-panel: pa[p * MR + r] = A[r, p]; B micro-panel: pb[p * NR + j] = B[p, j]; zero past the edge."""
    lib = compile_kernel(kernel, "plain", tmp_path)
    mr, nr, kc = kernel.mr, kernel.nr, 7
    a = np.arange(mr * 10, dtype=np.float32).reshape(mr, 10) + 1
    pa = np.full(mr * kc, np.nan, np.float32)
    lib.pack_a(mr - 1, kc, addr(a), 10, 1, addr(pa))  # the last row is past the edge
    want_a = np.zeros((kc, mr), np.float32)
    want_a[:, :mr - 1] = a[:mr - 1, :kc].T
    np.testing.assert_array_equal(pa.reshape(kc, mr), want_a)
    b = np.arange(kc * (nr + 4), dtype=np.float32).reshape(kc, nr + 4) + 1
    for nv in (nr, nr - 3):
        pb = np.full(nr * kc, np.nan, np.float32)
        lib.pack_b(nv, kc, addr(b), nr + 4, 1, addr(pb))
        want_b = np.zeros((kc, nr), np.float32)
        want_b[:, :nv] = b[:, :nv]
        np.testing.assert_array_equal(pb.reshape(kc, nr), want_b)
    bt = np.ascontiguousarray(b.T)  # B stored transposed: the same panel, gathered
    pb = np.full(nr * kc, np.nan, np.float32)
    lib.pack_b(nr, kc, addr(bt), 1, kc, addr(pb))
    np.testing.assert_array_equal(pb.reshape(kc, nr), b[:, :nr])


def test_blocks_fit_their_caches():
    for g in KERNELS:
        assert g.kc == KC_MAX and g.kc * g.nr * 4 <= L1_PANEL_BYTES
        assert g.mc % g.mr == 0 and g.mc * g.kc * 4 <= L2_BLOCK_BYTES
        assert GemmKernel.from_symbol(g.symbol) == g
    assert GemmKernel.from_symbol("cblas_sgemm") is None
    with pytest.raises(ValueError, match="NR a multiple of 8"):
        GemmKernel(6, 12)


@pytest.mark.parametrize("target, want", [
    ("c -mcpu=x86-64-v3", GemmKernel(6, 16)), ("c -mcpu=x86-64-v4", GemmKernel(8, 32)),
    ("c -march=znver4", GemmKernel(8, 32)), ("c -mcpu=x86-64-v2", None), ("c -mcpu=cortex-m7", None)])
def test_kernel_follows_the_target_isa(target, want):
    sched = ScheduleContext(Target(target))
    assert choose_kernel(sched, 197, 768, 768, []) == want
    if want is not None and want.nr == 32:  # the default pads to the fewest rows: 36 rows are 3 x 12, not 5 x 8
        assert choose_kernel(sched, 36, 768, 768, []) == GemmKernel(12, 32)
        assert choose_kernel(sched, 64, 768, 768, []) == choose_kernel(sched, 24, 768, 768, []) == GemmKernel(8, 32)
    assert choose_kernel(sched, 4, 768, 768, []) is None  # too few rows for MR


def products() -> tuple[relay.Function, list[tuple[int, ...]]]:
    """Products with ragged edges, broadcast batches, transposed B and a fused epilogue."""
    shapes = [(197, 771), (771, 17), (2, 1, 17, 5), (3, 5, 33), (2, 197, 64), (64, 5), (17, 771), (5, 771),
              (3, 197, 64), (3, 197, 64), (9, 13), (13, 40), (40,)]
    v = [relay.Var(f"x{i}", relay.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    outs = (
        matmul.matmul(v[0], v[1]),
        matmul.matmul(v[2], v[3]),  # batch (2, 1) against (3,): broadcast to (2, 3)
        matmul.matmul(v[4], v[5]),  # a batch against a matrix: folded into rows
        matmul.dense(v[6], v[7]),  # B transposed
        matmul.matmul(v[8], transform.transpose(v[9], axes=(0, 2, 1))),  # attention's Q Kᵀ
        elemwise_activation.relu(elemwise.add(matmul.matmul(v[10], v[11]), v[12])),  # bias + relu epilogue
    )
    return relay.Function(v, relay.Tuple(outs)), shapes


def reference(args: list[np.ndarray]) -> list[np.ndarray]:
    a = [x.astype(np.float64) for x in args]
    return [a[0] @ a[1], a[2] @ a[3], a[4] @ a[5], a[6] @ a[7].T, a[8] @ a[9].transpose(0, 2, 1),
            np.maximum(a[10] @ a[11] + a[12], 0)]


@pytest.mark.parametrize("target, symbol", [("c -mcpu=x86-64-v3", "ts_sgemm_6x16"), ("c", None)])
def test_products_built_by_tessera_match_numpy(target, symbol):
    if symbol is not None:
        require_level("x86-64-v3")
    func, shapes = products()
    lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    source = "".join(lib.c_sources.values())
    if symbol is not None:
        assert f"{LIBRARY_MACRO} void {symbol}(" in source and "_mm256_fmadd_ps" in source
    elif X86 and "avx512f" in tessera.target.simd.native_cpu_flags():
        assert f"{LIBRARY_MACRO} void ts_sgemm_8x32(" in source and "_mm512_fmadd_ps" in source
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    for got, want in zip(lib(*args), reference(args)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_native_avx512_products_match_numpy():
    require_level("x86-64-v4")
    func, shapes = products()
    lib = tessera.build(relay.IRModule.from_expr(func), target="c -mcpu=x86-64-v4")
    assert f"{LIBRARY_MACRO} void ts_sgemm_8x32(" in "".join(lib.c_sources.values())
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    for got, want in zip(lib(*args), reference(args)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
