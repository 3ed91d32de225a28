"""`blas`: convolutions and matrix products offloaded to OpenBLAS's cblas_sgemm.

The whole integration is this module: a target kind with a pattern table, a
RelayToTIR pass and a TIRToRuntime code generator; `target="blas"` is an
alias for the host `c` target with this accelerator.

* Patterns: conv2d (wide groups; depthwise stays on the host) and matmul in float32, each with an optional
  bias add and ReLU that run inside the same kernel.
* RelayToTIR: every `blas` partition becomes a PrimFunc that calls
  `cblas_sgemm` through `call_extern`. A convolution first unfolds its input
  (im2col) into a scratch buffer that is a TIR `Allocate`, so memory
  planning sees it; 1x1 stride-1 convolutions multiply the input in place.
* TIRToRuntime: the host C code generator, extended to include <cblas.h>,
  to print the CBLAS enums by name and to link -lopenblas.
"""

from __future__ import annotations

import math
import os

from ..codegen.c_host import build_c_module
from ..codegen.c_source import CodeGenC
from ..op.registry import Op
from ..relay.dataflow_pattern import is_op, wildcard
from ..relay.expr import Call, Constant, Expr, Function, Tuple
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import post_order
from ..target.builtin import c_toolchain
from ..target.hooks import RELAY_TO_TIR, TIR_TO_RUNTIME
from ..target.kind import TargetKind
from ..target.tags import register_tag
from ..target.target import Target
from ..tir import expr as E
from ..tir import stmt as S
from ..tir.buffer import Buffer
from ..relay.pattern_table import PatternEntry
from ..transform.pass_infra import Pass, PassContext
from ..backend.target_hooks import TARGET_ATTR

KIND = "blas"
# CBLAS enum values (cblas.h); the code generator prints them by name.
CBLAS_ENUMS = {101: "CblasRowMajor", 111: "CblasNoTrans", 112: "CblasTrans"}
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
ENUM_ARGS = {"cblas_sgemm": 3, "cblas_sgemv": 2}  # leading arguments that are CBLAS enums
# Output rows of a convolution unfolded at a time: the im2col block stays in cache.
IM2COL_BLOCK_BYTES = 1 << 20


# ------------------------------------------------------------------ patterns
def _float32(call: Expr) -> bool:
    return isinstance(call.checked_type_, TensorType) and call.checked_type_.dtype == "float32"


def _with_epilogue(core):
    bias = is_op("add")(core, wildcard())
    return (bias | core).optional(lambda p: is_op("nn.relu")(p))


def _conv_ok(call: Expr) -> bool:
    conv = _anchor(call, "nn.conv2d")
    if conv is None or not _float32(conv) or not _bias_ok(call, conv):
        return False
    oc, icpg, kh, kw = conv.args[1].checked_type.shape
    # a GEMM per group pays only when the groups are wide; depthwise stays on the host
    return conv.attrs.groups == 1 or (oc // conv.attrs.groups >= 4 and icpg * kh * kw >= 8)


def _matmul_ok(call: Expr) -> bool:
    mm = _anchor(call, "nn.matmul")
    if mm is None or not _float32(mm):
        return False
    a, b = (x.checked_type for x in mm.args)
    return a.ndim >= 2 and b.ndim >= 2 and _bias_ok(call, mm)


def _anchor(call: Expr, name: str) -> Call | None:
    for node in post_order(call):
        if isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == name:
            return node
    return None


def _bias_ok(call: Expr, core: Call) -> bool:
    """A bias must broadcast along the output's channels (conv) or columns (matmul) only."""
    adds = [n for n in post_order(call) if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "add"]
    if not adds:
        return True
    (add,) = adds
    out = core.checked_type
    bias = add.args[1] if add.args[0] is core else add.args[0]
    if add.args[0] is not core and add.args[1] is not core:
        return False
    return add.checked_type == out and _bias_axis(bias.checked_type.shape, out) is not None


def _bias_axis(shape: tuple[int, ...], out: TensorType) -> int | None:
    """The output axis a bias of `shape` varies along (None if it varies along several)."""
    full = (1,) * (out.ndim - len(shape)) + tuple(shape)
    varying = [k for k, d in enumerate(full) if d != 1]
    channel = 1 if out.ndim == 4 else out.ndim - 1
    if not varying:
        return channel
    if varying == [channel] and full[channel] == out.shape[channel]:
        return channel
    return None


PATTERN_TABLE = [
    PatternEntry("blas.conv2d", _with_epilogue(is_op("nn.conv2d")(wildcard(), wildcard())), _conv_ok),
    PatternEntry("blas.matmul", _with_epilogue(is_op("nn.matmul")(wildcard(), wildcard())), _matmul_ok),
]


# ---------------------------------------------------------------- RelayToTIR
def _ptr(buf: Buffer, offset: E.PrimExpr | int = 0) -> E.PrimExpr:
    return E.BufferPtr(buf, E.as_expr(offset))


def _sgemm(m: int, n: E.ExprLike, k: int, a: E.PrimExpr, b: E.PrimExpr, c: E.PrimExpr, beta: float,
           ldb: E.ExprLike | None = None, ldc: E.ExprLike | None = None) -> S.Stmt:
    """C (m x n, row stride ldc) = A (m x k) . B (k x n, row stride ldb) + beta C."""
    n = E.as_expr(n)
    args = [E.IntImm(ROW_MAJOR), E.IntImm(NO_TRANS), E.IntImm(NO_TRANS), E.IntImm(m), n, E.IntImm(k),
            E.FloatImm(1.0), a, E.IntImm(k), b, E.as_expr(n if ldb is None else ldb), E.FloatImm(beta), c,
            E.as_expr(n if ldc is None else ldc)]
    return S.Evaluate(E.call("cblas_sgemm", args, "void"))


def _sgemv_t(k: int, n: int, a: E.PrimExpr, x: E.PrimExpr, y: E.PrimExpr, beta: float) -> S.Stmt:
    """y (n) = A (k x n)^T . x (k) + beta y: one pass over A's rows, for 1-row products."""
    args = [E.IntImm(ROW_MAJOR), E.IntImm(TRANS), E.IntImm(k), E.IntImm(n), E.FloatImm(1.0), a, E.IntImm(n),
            x, E.IntImm(1), E.FloatImm(beta), y, E.IntImm(1)]
    return S.Evaluate(E.call("cblas_sgemv", args, "void"))


def _loops(extents: list[int], names: list[str], body) -> S.Stmt:
    vars_ = [E.Var(n) for n in names]
    stmt = body(*vars_)
    for v, extent in reversed(list(zip(vars_, extents))):
        stmt = S.For(v, E.IntImm(extent), stmt) if extent != 1 else _bind(v, stmt)
    return stmt


def _bind(var: E.Var, stmt: S.Stmt) -> S.Stmt:
    from ..tir.functor import substitute_stmt

    return substitute_stmt(stmt, {var: E.IntImm(0)})


class _Epilogue:
    """Bias (initialising C before a beta=1 sgemm) and ReLU (a pass after it)."""

    def __init__(self, bias: Buffer | None, relu: bool) -> None:
        self.bias, self.relu = bias, relu

    def init(self, out: Buffer, rows: int, cols: int, base: E.PrimExpr, by_row: bool) -> S.Stmt | None:
        if self.bias is None:
            return None
        bias = _flat(self.bias)

        def store(r: E.Var, q: E.Var) -> S.Stmt:
            index = E.IntImm(0) if bias.size == 1 else (r if by_row else q)
            value = E.BufferLoad(bias, (index,), "float32")
            return S.BufferStore(_flat(out), value, (E.add(base, E.add(E.mul(r, cols), q)),))

        return _loops([rows, cols], ["r", "q"], store)

    def finish(self, out: Buffer, count: int, base: E.PrimExpr) -> S.Stmt | None:
        if not self.relu:
            return None
        flat = _flat(out)
        return _loops([count], ["i"], lambda i: S.BufferStore(
            flat, E.maximum(E.BufferLoad(flat, (E.add(base, i),), "float32"), E.FloatImm(0.0)), (E.add(base, i),)))


def _flat(buf: Buffer) -> Buffer:
    return buf.flat()


class _Lowering:
    """One blas partition -> statements over its parameter and output buffers."""

    def __init__(self, func: Function, symbol: str) -> None:
        self.func, self.symbol = func, symbol
        self.buffers: dict[int, Buffer] = {}
        self.allocs: list[Buffer] = []
        self.stmts: list[S.Stmt] = []

    def run(self, target: Target) -> S.PrimFunc:
        params = []
        for k, p in enumerate(self.func.params):
            buf = Buffer(f"p{k}", p.checked_type.shape, p.checked_type.dtype)
            self.buffers[id(p)] = buf
            params.append(buf)
        outputs = list(self.func.body.fields) if isinstance(self.func.body, Tuple) else [self.func.body]
        outs = []
        for k, o in enumerate(outputs):
            buf = Buffer(f"out{k}" if len(outputs) > 1 else "out", o.checked_type.shape, o.checked_type.dtype)
            self.buffers[id(o)] = buf
            outs.append(buf)
        for node in post_order(self.func.body, into_functions=False):
            if isinstance(node, Call) and isinstance(node.op, Function):
                self._composite(node)
        body: S.Stmt = S.seq(*self.stmts)
        for buf in reversed(self.allocs):
            body = S.Allocate(buf, body)
        return S.PrimFunc(self.symbol, tuple(params + outs), body, len(params), {TARGET_ATTR: target})

    def _buffer(self, e: Expr) -> Buffer:
        if id(e) not in self.buffers:
            if isinstance(e, Constant):
                raise NotImplementedError("blas partitions take constants as arguments")
            buf = Buffer(f"t{len(self.allocs)}", e.checked_type.shape, e.checked_type.dtype)
            self.buffers[id(e)] = buf
            self.allocs.append(buf)
        return self.buffers[id(e)]

    def _composite(self, call: Call) -> None:
        comp: Function = call.op  # type: ignore[assignment]
        local = {id(p): self._buffer(a) for p, a in zip(comp.params, call.args)}
        ops = {n.op.name: n for n in post_order(comp.body) if isinstance(n, Call) and isinstance(n.op, Op)}
        bias = None
        if "add" in ops:
            add = ops["add"]
            core = ops.get("nn.conv2d") or ops["nn.matmul"]
            other = add.args[1] if add.args[0] is core else add.args[0]
            bias = local[id(other)]
        epi = _Epilogue(bias, "nn.relu" in ops)
        out = self._buffer(call)
        if comp.attrs.composite == "blas.conv2d":
            conv = ops["nn.conv2d"]
            self.stmts.append(self._conv(conv, local[id(conv.args[0])], local[id(conv.args[1])], out, epi))
        else:
            mm = ops["nn.matmul"]
            self.stmts.append(self._matmul(mm, local[id(mm.args[0])], local[id(mm.args[1])], out, epi))

    def _conv(self, conv: Call, data: Buffer, weight: Buffer, out: Buffer, epi: _Epilogue) -> S.Stmt:
        """Per image and group: unfold a block of output rows, multiply, repeat."""
        a = conv.attrs
        n, c, h, w = data.shape
        oc, icpg, kh, kw = weight.shape
        oh, ow = out.shape[2:]
        groups = a.groups
        ocpg, k_dim, hw = oc // groups, icpg * kh * kw, oh * ow
        beta = 1.0 if epi.bias is not None else 0.0
        batch, group = E.Var("b"), E.Var("g")
        in_base = E.add(E.mul(batch, c * h * w), E.mul(group, icpg * h * w))
        out_base = E.add(E.mul(batch, oc * hw), E.mul(group, ocpg * hw))
        w_ptr = _ptr(weight.flat(), E.mul(group, ocpg * k_dim))
        if kh == kw == 1 and a.strides == (1, 1) and not any(a.padding):
            core = _sgemm(ocpg, hw, k_dim, w_ptr, _ptr(data.flat(), in_base), _ptr(out.flat(), out_base), beta)
        else:
            rows = max(1, min(oh, IM2COL_BLOCK_BYTES // (k_dim * ow * 4)))
            col = Buffer(f"col{len(self.allocs)}", (k_dim * rows * ow,), "float32")
            self.allocs.append(col)
            block = E.Var("blk")
            first_row = E.mul(block, rows)
            n_rows = E.minimum(E.IntImm(rows), E.sub(E.IntImm(oh), first_row)) if oh % rows else E.IntImm(rows)
            n_cols = E.mul(n_rows, ow)
            unfold = _im2col(data.flat(), col, in_base, first_row, n_rows, (icpg, h, w), (kh, kw, ow), a)
            multiply = _sgemm(ocpg, n_cols, k_dim, w_ptr, _ptr(col), _ptr(out.flat(), E.add(out_base, E.mul(first_row, ow))),
                              beta, ldb=n_cols, ldc=hw)
            core = S.For(block, E.IntImm(-(-oh // rows)), S.seq(unfold, multiply))
        image = S.seq(
            epi.init(out, oc, hw, E.mul(batch, oc * hw), by_row=True),
            S.For(group, E.IntImm(groups), core) if groups > 1 else _bind(group, core),
            epi.finish(out, oc * hw, E.mul(batch, oc * hw)),
        )
        return S.For(batch, E.IntImm(n), image) if n > 1 else _bind(batch, image)

    def _matmul(self, mm: Call, lhs: Buffer, rhs: Buffer, out: Buffer, epi: _Epilogue) -> S.Stmt:
        m, k = lhs.shape[-2:]
        n = rhs.shape[-1]
        batch_shape = out.shape[:-2]
        count = math.prod(batch_shape)
        b = E.Var("b")
        idx = _unravel(b, batch_shape)
        a_off = E.mul(_ravel_broadcast(idx, batch_shape, lhs.shape[:-2]), m * k)
        b_off = E.mul(_ravel_broadcast(idx, batch_shape, rhs.shape[:-2]), k * n)
        c_off = E.mul(b, m * n)
        beta = 1.0 if epi.bias is not None else 0.0
        a_ptr, b_ptr, c_ptr = _ptr(_flat(lhs), a_off), _ptr(_flat(rhs), b_off), _ptr(_flat(out), c_off)
        product = _sgemv_t(k, n, b_ptr, a_ptr, c_ptr, beta) if m == 1 else _sgemm(m, n, k, a_ptr, b_ptr, c_ptr, beta)
        body = S.seq(epi.init(out, m, n, c_off, by_row=False), product, epi.finish(out, m * n, c_off))
        return S.For(b, E.IntImm(count), body) if count > 1 else _bind(b, body)


def _unravel(flat: E.PrimExpr, shape: tuple[int, ...]) -> list[E.PrimExpr]:
    idx = []
    for extent in reversed(shape):
        idx.append(E.floormod(flat, extent))
        flat = E.floordiv(flat, extent)
    return idx[::-1]


def _ravel_broadcast(idx: list[E.PrimExpr], out_shape: tuple[int, ...], shape: tuple[int, ...]) -> E.PrimExpr:
    flat: E.PrimExpr = E.IntImm(0)
    offset = len(out_shape) - len(shape)
    for k, extent in enumerate(shape):
        flat = E.add(E.mul(flat, extent), idx[offset + k] if extent != 1 else E.IntImm(0))
    return flat


def _ceildiv(a: E.PrimExpr, b: int) -> E.PrimExpr:
    return E.floordiv(E.add(a, b - 1), b)


def _clamp(x: E.PrimExpr, lo: E.ExprLike, hi: E.ExprLike) -> E.PrimExpr:
    return E.minimum(E.maximum(x, lo), hi)


def _im2col(data: Buffer, col: Buffer, base: E.PrimExpr, first_row: E.PrimExpr, n_rows: E.PrimExpr,
            chw: tuple[int, int, int], kernel: tuple[int, int, int], a) -> S.Stmt:
    """Unfold output rows [first_row, first_row + n_rows) into `col` (K x n_rows*ow, packed).

    Each kernel tap copies the valid stretch of one input row as a contiguous
    (or strided) run and zero-fills the padding on either side, so the inner
    loops have no conditions for gcc to trip over.
    """
    c, h, w = chw
    kh, kw, ow = kernel
    (sh, sw), (dh, dw), (pt, pl) = a.strides, a.dilation, (a.padding[0], a.padding[1])
    n_cols = E.mul(n_rows, ow)
    ci, ky, kx, row = E.Var("ci"), E.Var("ky"), E.Var("kx"), E.Var("oyl")
    lo, hi, i = E.Var("lo"), E.Var("hi"), E.Var("i")
    tap = E.add(E.mul(E.add(E.mul(ci, kh), ky), kw), kx)
    dst = E.add(E.mul(tap, n_cols), E.mul(row, ow))
    y = E.sub(E.add(E.mul(E.add(first_row, row), sh), E.mul(ky, dh)), pt)
    src = E.add(base, E.mul(E.add(E.mul(ci, h), y), w))
    shift = E.sub(E.mul(kx, dw), pl)  # input column of output column 0
    zero = E.FloatImm(0.0)

    def fill(start: E.PrimExpr, count: E.PrimExpr) -> S.Stmt:
        return S.For(i, count, S.BufferStore(col, zero, (E.add(dst, E.add(start, i)),)))

    copy = S.For(i, E.sub(hi, lo), S.BufferStore(
        col, E.BufferLoad(data, (E.add(src, E.add(E.mul(E.add(lo, i), sw), shift)),), "float32"),
        (E.add(dst, E.add(lo, i)),)))
    inside = S.LetStmt(lo, _clamp(_ceildiv(E.neg(shift), sw), 0, ow), S.LetStmt(
        hi, _clamp(_ceildiv(E.sub(w, shift), sw), lo, ow),
        S.seq(fill(E.IntImm(0), lo), copy, fill(hi, E.sub(E.IntImm(ow), hi)))))
    row_stmt = S.IfThenElse(E.logical_and(E.ge(y, 0), E.lt(y, h)), inside, fill(E.IntImm(0), E.IntImm(ow)))
    nest: S.Stmt = S.For(row, n_rows, row_stmt)
    for var, extent in ((kx, kw), (ky, kh), (ci, c)):
        nest = S.For(var, E.IntImm(extent), nest) if extent > 1 else _bind(var, nest)
    return nest


def _out_size(size: int, k: int, s: int, d: int, pb: int, pe: int) -> int:
    return (size + pb + pe - d * (k - 1) - 1) // s + 1


class BlasRelayToTIR(Pass):
    """Lower every function partitioned for `blas` into a PrimFunc of the same name."""

    name = "BlasRelayToTIR"
    opt_level = 0

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        result = mod
        for gv, func in mod.items():
            if isinstance(func, Function) and func.attrs.compiler == KIND:
                target = func.attrs.target if isinstance(func.attrs.target, Target) else Target("c -accelerators=blas").accelerators[0]
                result = result.with_function(gv, _Lowering(func, gv.name_hint).run(target))
        return result


# -------------------------------------------------------------- TIRToRuntime
class BlasCodeGen(CodeGenC):
    """The host C generator plus <cblas.h> and CBLAS enums by name."""

    def preamble_lines(self) -> list[str]:
        lines = super().preamble_lines()
        return lines[:4] + ["#include <cblas.h>"] + lines[4:]

    def emit_extern_call(self, name: str, args: list[str], call: E.Call) -> str:
        if name in ENUM_ARGS:
            args = [CBLAS_ENUMS.get(int(a), a) if k < ENUM_ARGS[name] else a for k, a in enumerate(args)]
        return super().emit_extern_call(name, args, call)


def openblas_core_for_this_cpu() -> str | None:
    """The OpenBLAS kernel family this CPU's flags allow (None: let OpenBLAS decide).

    OpenBLAS picks its kernels from the CPU model number; a model newer than
    the library (Debian 12's 0.3.21 on a model-207 Xeon, say) falls back to
    generic SSE3 "Prescott" kernels, measured 3 x slower here than its
    AVX-512 ones. The flags say what the CPU can run whatever its model.
    """
    from ..target.simd import native_cpu_flags

    flags = native_cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def _choose_openblas_core() -> None:
    """Set OPENBLAS_CORETYPE (read when OpenBLAS loads) unless the user has."""
    core = openblas_core_for_this_cpu()
    if core is not None:
        os.environ.setdefault("OPENBLAS_CORETYPE", core)


def blas_toolchain(target: Target):
    _choose_openblas_core()  # before any library linking OpenBLAS is loaded into this process
    base = c_toolchain(Target("c"))
    return type(base)(cc=base.cc, cflags=base.cflags, warning_flags=base.warning_flags,
                      ldflags=(*base.ldflags, "-lopenblas"), include_dirs=base.include_dirs,
                      runtime_sources=base.runtime_sources)


def blas_tir_to_runtime(mod: IRModule, target: Target):
    return build_c_module(mod, target, codegen_class=BlasCodeGen, prefix="blas")


(
    TargetKind.register(KIND, device="cpu", accelerator=True,
                        doc="OpenBLAS cblas_sgemm for conv2d (im2col) and matmul, float32")
    .set_pattern_table(PATTERN_TABLE)
    .set_toolchain(blas_toolchain)
    .set_attr(RELAY_TO_TIR, BlasRelayToTIR())
    .set_attr(TIR_TO_RUNTIME, blas_tir_to_runtime)
)
register_tag("blas", {"kind": "c", "accelerators": [{"kind": KIND}]}, doc="host C + OpenBLAS")
