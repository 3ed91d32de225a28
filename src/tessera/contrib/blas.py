"""`blas`: convolutions and matrix products offloaded to OpenBLAS's cblas_sgemm.

The whole integration is this module: a target kind with a pattern table, a
RelayToTIR pass and a TIRToRuntime code generator; `target="blas"` is an
alias for the host `c` target with this accelerator.

* Patterns: conv2d (groups=1) and matmul in float32, each with an optional
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

from ..codegen.c_host import build_c_module
from ..codegen.c_source import CodeGenC
from ..op.registry import Op
from ..relay.dataflow_pattern import is_op, wildcard
from ..relay.expr import Call, Constant, Expr, Function, Tuple, Var
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
from ..transform.merge_composite import PatternEntry
from ..transform.pass_infra import Pass, PassContext
from ..backend.target_hooks import TARGET_ATTR

KIND = "blas"
# CBLAS enum values (cblas.h); the code generator prints them by name.
CBLAS_ENUMS = {101: "CblasRowMajor", 111: "CblasNoTrans", 112: "CblasTrans"}
ROW_MAJOR, NO_TRANS = 101, 111


# ------------------------------------------------------------------ patterns
def _float32(call: Expr) -> bool:
    return isinstance(call.checked_type_, TensorType) and call.checked_type_.dtype == "float32"


def _with_epilogue(core):
    bias = is_op("add")(core, wildcard())
    return (bias | core).optional(lambda p: is_op("nn.relu")(p))


def _conv_ok(call: Expr) -> bool:
    conv = _anchor(call, "nn.conv2d")
    return conv is not None and conv.attrs.groups == 1 and _float32(conv) and _bias_ok(call, conv)


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


def _sgemm(m: int, n: int, k: int, a: E.PrimExpr, b: E.PrimExpr, c: E.PrimExpr, beta: float) -> S.Stmt:
    args = [E.IntImm(ROW_MAJOR), E.IntImm(NO_TRANS), E.IntImm(NO_TRANS), E.IntImm(m), E.IntImm(n), E.IntImm(k),
            E.FloatImm(1.0), a, E.IntImm(k), b, E.IntImm(n), E.FloatImm(beta), c, E.IntImm(n)]
    return S.Evaluate(E.call("cblas_sgemm", args, "void"))


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
        a = conv.attrs
        n, c, h, w = data.shape
        oc, _, kh, kw = weight.shape
        oh, ow = out.shape[2:]
        k_dim, n_dim = c * kh * kw, oh * ow
        direct = kh == kw == 1 and a.strides == (1, 1) and not any(a.padding)
        col = None
        if not direct:
            col = Buffer(f"col{len(self.allocs)}", (k_dim, n_dim), "float32")
            self.allocs.append(col)
        flat_in, flat_out = _flat(data), _flat(out)
        body = []
        batch = E.Var("b")
        in_base, out_base = E.mul(batch, c * h * w), E.mul(batch, oc * n_dim)
        if col is not None:
            body.append(_im2col(flat_in, col, in_base, (c, h, w), (kh, kw), a))
        body.append(epi.init(out, oc, n_dim, out_base, by_row=True))
        b_ptr = _ptr(col) if col is not None else _ptr(flat_in, in_base)
        body.append(_sgemm(oc, n_dim, k_dim, _ptr(_flat(weight)), b_ptr, _ptr(flat_out, out_base),
                           1.0 if epi.bias is not None else 0.0))
        body.append(epi.finish(out, oc * n_dim, out_base))
        stmt = S.seq(*body)
        return S.For(batch, E.IntImm(n), stmt) if n > 1 else _bind(batch, stmt)

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
        body = S.seq(
            epi.init(out, m, n, c_off, by_row=False),
            _sgemm(m, n, k, _ptr(_flat(lhs), a_off), _ptr(_flat(rhs), b_off), _ptr(_flat(out), c_off),
                   1.0 if epi.bias is not None else 0.0),
            epi.finish(out, m * n, c_off),
        )
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


def _im2col(data: Buffer, col: Buffer, base: E.PrimExpr, chw: tuple[int, int, int], kernel: tuple[int, int],
            a) -> S.Stmt:
    c, h, w = chw
    kh, kw = kernel
    out_w = _out_size(w, kw, a.strides[1], a.dilation[1], a.padding[1], a.padding[3])
    out_h = col.shape[1] // out_w

    def element(ci: E.Var, ky: E.Var, kx: E.Var, oy: E.Var, ox: E.Var) -> S.Stmt:
        y = E.sub(E.add(E.mul(oy, a.strides[0]), E.mul(ky, a.dilation[0])), a.padding[0])
        x = E.sub(E.add(E.mul(ox, a.strides[1]), E.mul(kx, a.dilation[1])), a.padding[1])
        inside = E.logical_and(E.logical_and(E.ge(y, 0), E.lt(y, h)), E.logical_and(E.ge(x, 0), E.lt(x, w)))
        src = E.add(base, E.add(E.mul(E.add(E.mul(ci, h), E.minimum(E.maximum(y, 0), h - 1)), w),
                                E.minimum(E.maximum(x, 0), w - 1)))
        value = E.select(inside, E.BufferLoad(data, (src,), "float32"), E.FloatImm(0.0))
        row = E.add(E.mul(E.add(E.mul(ci, kh), ky), kw), kx)
        return S.BufferStore(col, value, (row, E.add(E.mul(oy, out_w), ox)))

    return _loops([c, kh, kw, out_h, out_w], ["ci", "ky", "kx", "oy", "ox"], element)


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
        if name == "cblas_sgemm":
            args = [CBLAS_ENUMS.get(int(a), a) if k < 3 else a for k, a in enumerate(args)]
        return super().emit_extern_call(name, args, call)


def blas_toolchain(target: Target):
    base = c_toolchain(Target("c"))
    return type(base)(cc=base.cc, cflags=base.cflags, warning_flags=base.warning_flags,
                      ldflags=(*base.ldflags, "-lopenblas"), include_dirs=base.include_dirs,
                      runtime_sources=base.runtime_sources)


def blas_tir_to_runtime(mod: IRModule, target: Target):
    return build_c_module(mod, target, codegen_class=BlasCodeGen, prefix="blas")


(
    TargetKind.register(KIND, device="cpu", accelerator=True,
                        doc="OpenBLAS cblas_sgemm for conv2d (im2col) and matmul, float32")
    .set_attr("pattern_table", PATTERN_TABLE)
    .set_attr("toolchain", blas_toolchain)
    .set_attr(RELAY_TO_TIR, BlasRelayToTIR())
    .set_attr(TIR_TO_RUNTIME, blas_tir_to_runtime)
)
register_tag("blas", {"kind": "c", "accelerators": [{"kind": KIND}]}, doc="host C + OpenBLAS")
