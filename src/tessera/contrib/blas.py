"""`blas`: convolutions and matrix products offloaded to OpenBLAS's cblas_sgemm.

A target kind (`target="blas"`: host `c` plus this accelerator) with
* a pattern table: float32 conv2d (wide groups; depthwise stays on the host)
  and matmul, each with an optional add (a bias) and ReLU, when the GEMM is
  big enough to pay (MIN_MACS) and the host has no faster GEMM of its own
  (HOST_GEMM_FIRST), or when a pin (`on_target`) says so; a refused one stays
  in the host's C, and the partition report shows why;
* RelayToTIR (`LowerPartitions`): the conv or matmul becomes a `te.extern`
  stage calling cblas_sgemm, whose result the add and ReLU (ordinary
  computes) update in place; a convolution unfolds its input (im2col) a
  block of output rows at a time, so the scratch stays small and in cache;
* TIRToRuntime: the host C generator plus <cblas.h>, CBLAS enums by name
  and -lopenblas; OpenBLAS itself runs on one thread (SERIAL_OPENBLAS), and
  tessera's OpenMP threads share a big product: the blocks of an unfolded
  convolution, else parts of the GEMM's longer side (`Split`).
"""

from __future__ import annotations

import math

import dataclasses
import functools
import operator
import os
from dataclasses import dataclass
import platform

from .. import te
from ..backend.lower_partition import LowerPartitions, Lowering
from ..codegen.c_host import build_c_module
from ..codegen.c_source import CodeGenC
from ..op.nn.conv import ConvAttrs
from ..op.nn.gemm import KERNELS_BY_LANES, MIN_ROWS
from ..relay.dataflow_pattern import CallPattern, Match, Pattern, is_op, wildcard
from ..relay.expr import Call
from ..relay.pattern_table import PatternEntry, Refused
from ..target import simd
from ..target.builtin import c_toolchain
from ..target.hooks import RELAY_TO_TIR, TIR_TO_RUNTIME
from ..target.kind import TargetKind
from ..target.tags import register_tag
from ..target.target import Target
from ..te.parallel import PARALLEL_MIN_WORK, runs_in_row_parts
from ..tir import expr as E
from ..tir import stmt as S

KIND = "blas"
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enum values (cblas.h), printed by name in C
CBLAS_ENUMS = {ROW_MAJOR: "CblasRowMajor", NO_TRANS: "CblasNoTrans", TRANS: "CblasTrans"}
ENUM_ARGS = {"cblas_sgemm": 3, "cblas_sgemv": 2}  # leading arguments that are CBLAS enums
IM2COL_BLOCK_BYTES = 1 << 20  # output rows of a convolution unfolded at a time: the block stays in cache
# ... but at least this many columns of the GEMM: OpenBLAS packs the weights again in every call, as much
# work as a block's product when the block is a few dozen columns wide and the weights are large
BLOCK_MIN_COLUMNS = 256
# The smallest GEMM (multiply-adds of one call, per image and group) the blas partition takes, without and
# with an im2col unfold; smaller ones stay in the host's C (op/nn/conv*.py, op/nn/gemm.py). Measured with
# benchmarks/blas_threshold.py (single convolutions with bias and ReLU, one thread, 2-core AMD EPYC Zen 4
# with AVX-512, OpenBLAS 0.3.21): 1x1 convolutions of 0.3 M multiply-adds and more ran about as fast or
# faster on OpenBLAS (blas/c 0.5-1.2, mostly under 1); unfolded ones of 1.8 M to 460 M were slower
# (1.0-3.5 x: the host's direct convolution neither unfolds the input nor has OpenBLAS pack it again),
# but for 3-channel stems (about 1.0), and VGG-19 with its 1.8 G 3x3 ones on OpenBLAS took 1.07 x its
# time on the host; one-row products of 82 K (ad_autoencoder's) tied at 4 us.
MIN_MACS = {False: 1 << 17, True: 1 << 31}
# A host target with tessera's packed-panel GEMM (op/nn/gemm.py: AVX2 or AVX-512, products of MIN_ROWS rows
# or more) keeps the products: it runs them faster than OpenBLAS, with their bias, residual and activation in
# its epilogue. 2-core Zen 3 (AVX2; OpenBLAS 0.3.21's Haswell kernels), exported builds, 8 alternating rounds,
# blas / c: ResNet-50 1.11 at 1 thread and 1.08 at 2, gpt2_mlp 1.12 and 1.14, vit_block 1.05 and 1.11,
# convnext_block 1.04 and 1.10; ResNet-50's twelve 1x1 convolutions alone (blas_threshold.py) 0.87-1.15, nine
# above 1. On a Zen 4 with AVX-512 (2026-11-25) gpt2_mlp and the inverted-residual blocks took 10-30 % longer
# with OpenBLAS, ShuffleNet's grouped 1x1s less (0.92). OpenBLAS still takes what the host would run plainly.
HOST_GEMM_FIRST = True
# OpenBLAS runs serially: tessera's threads share a big product (see `Split`), in at most MAX_PARTS
# parts of PART_MIN rows or columns at least.
MAX_PARTS, PART_MIN = 4, 64


# ------------------------------------------------------------------ patterns
ACTIVATIONS = ("nn.relu", "nn.silu", "nn.hard_swish")  # elementwise tails the host would fuse, too


def _with_epilogue(core: Pattern) -> Pattern:
    """`core`, then optionally a bias add, a residual add, and an activation or a clip (ReLU6: a minimum
    of a maximum), all updating the product in place: the host would fuse them into its own convolution."""
    add = lambda p: is_op("add")(p, wildcard())  # noqa: E731

    def tail(p: Pattern) -> Pattern:
        clip = is_op("minimum")(is_op("maximum")(p, wildcard()), wildcard())
        return functools.reduce(operator.or_, [is_op(name)(p) for name in ACTIVATIONS], clip)
    return core.optional(add).optional(add).optional(tail)


CONV = is_op("nn.conv2d")(wildcard(), wildcard()).has_dtype("float32")
MATMUL = is_op("nn.matmul")(wildcard(), wildcard()).has_dtype("float32")
CONV_PATTERN = _with_epilogue(CONV)
MATMUL_PATTERN = _with_epilogue(MATMUL)


def _tail_fits(m: Match, core: Pattern) -> bool:
    """A bias or clip bound may not broadcast the product to a larger shape: the tail updates it in place."""
    tail = [e for p, e in m.matched() if isinstance(p, CallPattern)]  # the calls of the pattern, not its inputs
    return all(e.checked_type == m[core].checked_type for e in tail)


def _too_small(macs: int, unfolds: bool) -> Refused | None:
    """Why one GEMM of `macs` multiply-adds does not pay for the library call (and the unfold), or None where
    it does. See MIN_MACS."""
    least = MIN_MACS[unfolds]
    if macs >= least:
        return None
    what = "an unfolded (im2col) GEMM" if unfolds else "a GEMM"
    return Refused(f"{what} of {macs} multiply-adds, under {least}: the host's own C is as fast")


def _host_gemm_first(rows: int, host: Target) -> Refused | None:
    """Why the host keeps a product of `rows` rows (its A: a convolution's output channels per group, a
    matrix product's left rows), or None where its own GEMM would not run it (see HOST_GEMM_FIRST)."""
    lanes = simd.float32_lanes(host)
    if not HOST_GEMM_FIRST or lanes not in KERNELS_BY_LANES or rows < MIN_ROWS:
        return None
    return Refused(f"the host has its packed GEMM ({lanes} float32 lanes), measured faster than OpenBLAS on "
                   "such products, their tails fused")


def _unfolds(attrs: ConvAttrs, kh: int, kw: int) -> bool:
    """Does the convolution need im2col (else its input is the GEMM's B as it is)?"""
    return not (kh == kw == 1 and attrs.strides == (1, 1) and not any(attrs.padding))


# What OpenBLAS can run (`check`) and where the host is the faster place (`host_faster`: the size thresholds
# and HOST_GEMM_FIRST), kept apart so that a call pinned to blas goes there whatever its size.
def _conv_ok(m: Match) -> bool:
    conv = m.call(CONV)
    (oc, icpg, kh, kw), attrs = conv.args[1].tensor_type.shape, conv.attrs_as(ConvAttrs)
    # a GEMM per group only for wide groups; depthwise stays on the host
    return (attrs.groups == 1 or (oc // attrs.groups >= 4 and icpg * kh * kw >= 8)) and _tail_fits(m, CONV)


def _conv_host_faster(m: Match, host: Target) -> Refused | None:
    conv = m.call(CONV)
    (oc, icpg, kh, kw), attrs = conv.args[1].tensor_type.shape, conv.attrs_as(ConvAttrs)
    (oh, ow), ocpg = conv.tensor_type.shape[2:], oc // attrs.groups
    small = _too_small(ocpg * oh * ow * icpg * kh * kw, _unfolds(attrs, kh, kw))
    return small if small is not None else _host_gemm_first(ocpg, host)


def _matmul_ok(m: Match) -> bool:
    a, b = (x.tensor_type for x in m.call(MATMUL).args)
    return a.ndim >= 2 and b.ndim >= 2 and _tail_fits(m, MATMUL)


def _matmul_host_faster(m: Match, host: Target) -> Refused | None:
    a, b = (x.tensor_type for x in m.call(MATMUL).args)
    (rows, k), n = a.shape[-2:], b.shape[-1]
    if rows == 1 and math.prod((*a.shape[:-2], *b.shape[:-2])) == 1 and runs_in_row_parts(k, n, 4, k * n):
        # OpenBLAS's sgemv runs on the calling thread; the host's row parts (te/parallel.py) or, on AVX-512,
        # its few-row GEMM on all of them
        return Refused(f"a one-row product of {k} x {n}: the host's C runs it on all threads, sgemv on one")
    small = _too_small(rows * k * n, False)
    return small if small is not None else _host_gemm_first(rows, host)


CONV_ENTRY = PatternEntry("blas.conv2d", CONV_PATTERN, _conv_ok, _conv_host_faster)
MATMUL_ENTRY = PatternEntry("blas.matmul", MATMUL_PATTERN, _matmul_ok, _matmul_host_faster)
PATTERN_TABLE = [CONV_ENTRY, MATMUL_ENTRY]


# ---------------------------------------------------------------- RelayToTIR
def _sgemm(m: E.ExprLike, n: E.ExprLike, k: int, a: E.PrimExpr, b: E.PrimExpr, c: E.PrimExpr,
           ldb: E.ExprLike | None = None, ldc: E.ExprLike | None = None):
    """C (m x n, row stride ldc) = A (m x k) . B (k x n, row stride ldb)."""
    return te.call_extern("cblas_sgemm", ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, 1.0, a, k, b,
                          n if ldb is None else ldb, 0.0, c, n if ldc is None else ldc)


@dataclass(frozen=True)
class Split:
    """How threads share one m x n GEMM: `loop` runs over parts of `size` rows of A and C (`by_rows`) or
    columns of B and C. OpenBLAS packs the operand that is not split once per part, so the longer side
    is split: columns of a wide product (the weights are packed again per part), rows of a tall one."""

    by_rows: bool
    size: int
    total: int  # rows or columns split
    loop: te.IterVar

    @property
    def first(self) -> E.PrimExpr:
        return self.loop.var * self.size

    def width(self) -> E.ExprLike:
        """This part's rows or columns (the last part may be shorter)."""
        return E.minimum(self.size, self.total - self.first) if self.total % self.size else self.size


def split_gemm(m: int, n: int, k: int, by_rows: bool | None = None) -> Split:
    """The split of an m x n x k GEMM (by its longer side unless `by_rows` says): a power of two of parts,
    up to MAX_PARTS, each PART_MIN wide and a whole number of 16-wide panels; one part when the product is
    too small for threads (PARALLEL_MIN_WORK)."""
    by_rows = m > n if by_rows is None else by_rows
    total = m if by_rows else n
    parts = 1
    while m * n * k >= PARALLEL_MIN_WORK and parts < MAX_PARTS and total >= 2 * parts * PART_MIN:
        parts *= 2
    size = min(total, -(-(-(-total // parts)) // 16) * 16)
    return Split(by_rows, size, total, te.axis(-(-total // size), "part"))


def _split_sgemm(sp: Split, m: int, n: int, k: int, a: E.PrimExpr, b: E.PrimExpr, c: E.PrimExpr,
                 ldb: int, ldc: int):
    """`_sgemm` of this iteration's part of the product (a, b, c point at the whole operands)."""
    if sp.by_rows:
        return _sgemm(sp.width(), n, k, _moved(a, sp.first * k), b, _moved(c, sp.first * ldc), ldb, ldc)
    return _sgemm(m, sp.width(), k, a, _moved(b, sp.first), _moved(c, sp.first), ldb, ldc)


def _moved(ptr: E.PrimExpr, by: E.PrimExpr) -> E.PrimExpr:
    assert isinstance(ptr, E.BufferPtr)
    return E.BufferPtr(ptr.buffer, E.add(ptr.offset, by))


def _conv(m: Match, args: list[te.Tensor]) -> te.Tensor:
    """Per image and group, one sgemm on the input, or one per block of output rows on its im2col."""
    conv, attrs, (data, weight) = m.call(CONV), m.call(CONV).attrs_as(ConvAttrs), args
    out_shape, groups, (oh, ow) = conv.tensor_type.shape, attrs.groups, conv.tensor_type.shape[2:]
    oc, icpg, kh, kw = weight.shape
    ocpg, k_dim = oc // groups, icpg * kh * kw
    b, g = te.axis(data.shape[0], "b"), te.axis(groups, "g")
    w_ptr = lambda buf: te.pointer(buf, g.var * ocpg, 0, 0, 0)  # noqa: E731
    if not _unfolds(attrs, kh, kw):
        sp = split_gemm(ocpg, oh * ow, k_dim)
        return te.extern(out_shape, [data, weight], lambda ins, out: _split_sgemm(
            sp, ocpg, oh * ow, k_dim, w_ptr(ins[1]), te.pointer(ins[0], b.var, g.var * icpg, 0, 0),
            te.pointer(out, b.var, g.var * ocpg, 0, 0), oh * ow, oh * ow),
            "sgemm", loops=[b, g, sp.loop], parallel=sp.loop.extent > 1)
    # output rows per block, at most: as many as fit IM2COL_BLOCK_BYTES, but BLOCK_MIN_COLUMNS wide
    most = min(oh, max(IM2COL_BLOCK_BYTES // (k_dim * ow * 4), -(-BLOCK_MIN_COLUMNS // ow)))
    even = -(-oh // -(-oh // most))  # blocks of even height, widened to whole 16-column panels of B if they fit
    rows = next((r for r in range(even, most + 1) if r * ow % 16 == 0), even)
    blk = te.axis(-(-oh // rows), "blk")
    stages = _im2col(data, conv, b.var, g.var, blk.var * rows, rows)
    n_cols = (E.minimum(rows, oh - blk.var * rows) if oh % rows else rows) * ow
    # threads share the blocks; one block (a small image) they share by rows of the weights
    parallel = blk.extent > 1 and ocpg * oh * ow * k_dim >= PARALLEL_MIN_WORK
    by_rows = split_gemm(ocpg, oh * ow, k_dim, by_rows=True) if blk.extent == 1 else None

    def product(ins, out):
        a, col, c = w_ptr(ins[1]), te.pointer(ins[2]), te.pointer(out, b.var, g.var * ocpg, blk.var * rows, 0)
        sp = by_rows
        if sp is None or sp.loop.extent == 1:
            return _sgemm(ocpg, n_cols, k_dim, a, col, c, ldb=rows * ow, ldc=oh * ow)
        return S.For(sp.loop.var, E.IntImm(sp.loop.extent),
                     _split_sgemm(sp, ocpg, oh * ow, k_dim, a, col, c, rows * ow, oh * ow), S.ForKind.PARALLEL)
    return te.extern(out_shape, [data, weight, stages[-1]], product, "sgemm", loops=[b, g, blk],
                     per_iteration=stages, parallel=parallel)


def _im2col(data: te.Tensor, conv: Call, b: E.Var, g: E.Var, first: E.PrimExpr, rows: int) -> list[te.Tensor]:
    """Stages unfolding output rows [first, first + rows) of group g of image b, the last one im2col. Loops
    split at the padding copy without tests; a strided conv with several taps gathers them from a copy of
    the block's input window, in cache. Rows past the output repeat its last."""
    a, (h, w), (oh, ow) = conv.attrs_as(ConvAttrs), data.shape[2:], conv.tensor_type.shape[2:]
    icpg, kh, kw = conv.args[1].tensor_type.shape[1:]
    (sh, sw), (dh, dw), (pt, pl) = a.strides, a.dilation, a.padding[:2]

    def window(ci, wy, wx):  # the block's input window, padding included
        y = E.minimum(first * sh + wy, (oh - 1) * sh + (kh - 1) * dh) if oh % rows else first * sh + wy
        y, x = y - pt, wx - pl
        inside = E.logical_and(E.logical_and(E.ge(y, 0), E.lt(y, h)), E.logical_and(E.ge(x, 0), E.lt(x, w)))
        value = data[b, g * icpg + ci, y, x]
        return E.select(inside, value, 0.0, guarded=True) if any(a.padding) else value

    stages = []
    if max(sh, sw) > 1 and kh * kw > 1 and any(a.padding):
        shape = (icpg, (rows - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1)
        stages.append(te.compute(shape, window, "window", materialize=True, split_bounds=True,
                                 axis_names=("ci", "wy", "wx")))
    read = stages[0] if stages else window
    unfold = lambda ci, ky, kx, r, ox: read(ci, r * sh + ky * dh, ox * sw + kx * dw)  # noqa: E731
    return [*stages, te.compute((icpg, kh, kw, rows, ow), unfold, "im2col", materialize=True, split_bounds=True,
                                axis_names=("ci", "ky", "kx", "r", "ox"))]


def _matmul(m: Match, args: list[te.Tensor]) -> te.Tensor:
    """One product per batch element (broadcast batch dims read element 0); sgemv for one row.

    The threads share the batch (attention's heads), or else split the one product (a dense layer)."""
    (lhs, rhs), out_shape = args, m[MATMUL].tensor_type.shape
    (rows, k), n = lhs.shape[-2:], rhs.shape[-1]
    batch = [te.axis(d, f"b{i}") for i, d in enumerate(out_shape[:-2])]
    batched = math.prod(out_shape[:-2]) > 1
    sp = split_gemm(rows, n, k) if rows > 1 and not batched else None

    def at(buf) -> E.PrimExpr:
        lead = buf.shape[:-2]
        return te.pointer(buf, *(ax.var if d > 1 else 0 for ax, d in zip(batch[len(batch) - len(lead):], lead)), 0, 0)

    def product(ins, out):
        a, b, c = at(ins[0]), at(ins[1]), at(out)
        if rows == 1:  # y (n) = B (k x n)^T . x (k): one pass over B's rows
            return te.call_extern("cblas_sgemv", ROW_MAJOR, TRANS, k, n, 1.0, b, n, a, 1, 0.0, c, 1)
        if sp is not None:
            return _split_sgemm(sp, rows, n, k, a, b, c, n, n)
        return _sgemm(rows, n, k, a, b, c)
    if sp is not None:
        return te.extern(out_shape, [lhs, rhs], product, "sgemm", loops=[*batch, sp.loop],
                         parallel=sp.loop.extent > 1)
    parallel = batched and math.prod(out_shape) * k >= PARALLEL_MIN_WORK
    return te.extern(out_shape, [lhs, rhs], product, "sgemm", loops=batch, parallel=parallel)


LOWERINGS = [Lowering(CONV_ENTRY, CONV, _conv), Lowering(MATMUL_ENTRY, MATMUL, _matmul)]


# -------------------------------------------------------------- TIRToRuntime
# OpenBLAS runs each call on the calling thread, unless the user set its thread count: tessera's OpenMP
# pool owns the cores. OpenBLAS's own pool (the Debian build starts one per core) would compete with it,
# and a worker preempted by another busy process stalls every call: with two OpenBLAS threads, one core
# busy elsewhere, SqueezeNet took 268 ms instead of 49 ms and ic_resnet8 68 ms instead of 0.47 ms (2-core
# AMD EPYC, AVX-512). Set when the library loads; openblas_set_num_threads is process-wide.
SERIAL_OPENBLAS = [
    "#include <stdlib.h>",
    "__attribute__((constructor)) static void ts_openblas_on_the_calling_thread(void) {",
    '  if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("GOTO_NUM_THREADS")) openblas_set_num_threads(1);',
    "}",
]


class BlasCodeGen(CodeGenC):
    """The host C generator plus <cblas.h>, CBLAS enums by name and one-thread OpenBLAS."""

    def preamble_lines(self) -> list[str]:
        lines = super().preamble_lines()
        return lines[:4] + ["#include <cblas.h>"] + lines[4:] + ["", *SERIAL_OPENBLAS]

    def emit_extern_call(self, name: str, args: list[str], call: E.Call) -> str:
        if name in ENUM_ARGS:
            args = [CBLAS_ENUMS.get(int(a), a) if k < ENUM_ARGS[name] else a for k, a in enumerate(args)]
        return super().emit_extern_call(name, args, call)


def openblas_core_for_this_cpu() -> str | None:
    """The OpenBLAS kernel family this CPU's flags allow (None: let OpenBLAS decide). OpenBLAS picks
    by CPU model, and on a model newer than itself (Debian 12's 0.3.21 on a model-207 Xeon) falls back
    to generic SSE3 kernels, 3 x slower here than its AVX-512 ones."""
    flags = simd.native_cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    return "Haswell" if {"avx2", "fma"} <= flags else None


def blas_toolchain(target: Target):
    core = openblas_core_for_this_cpu()
    if core is not None:  # OPENBLAS_CORETYPE is read when OpenBLAS loads: set it first, unless the user has
        os.environ.setdefault("OPENBLAS_CORETYPE", core)
    base = c_toolchain(Target("c"))
    # on x86 gcc turns im2col's row copies into `rep movs`, slow to start on rows of a few floats
    x86 = ("-mmemcpy-strategy=libcall:-1:noalign",) if platform.machine() in ("x86_64", "AMD64") else ()
    return dataclasses.replace(base, cflags=(*base.cflags, *x86), ldflags=(*base.ldflags, "-lopenblas"))


(
    TargetKind.register(KIND, device="cpu", accelerator=True,
                        doc="OpenBLAS cblas_sgemm for conv2d (im2col) and matmul, float32")
    .set_pattern_table(PATTERN_TABLE)
    .set_toolchain(blas_toolchain)
    .set_attr(RELAY_TO_TIR, LowerPartitions(KIND, LOWERINGS))
    .set_attr(TIR_TO_RUNTIME, functools.partial(build_c_module, codegen_class=BlasCodeGen, prefix=KIND))
)
register_tag("blas", {"kind": "c", "accelerators": [{"kind": KIND}]}, doc="host C + OpenBLAS")
