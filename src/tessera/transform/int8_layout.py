"""Int8Layout: channels innermost (NHWC) inside the int8 region of a graph, on targets where it pays.

The importer keeps ONNX's NCHW. On a Cortex-M core an int8 kernel wants
every position's channels in one contiguous run: a 1x1 convolution then
reads its input as it is, and a k x k im2col copies whole channel runs per
tap instead of regrouping bytes (see `op.qnn_nhwc`). This pass rewrites
each 4-d `qnn.conv2d` / `qnn.avg_pool2d` into its NHWC form, and a
`qnn.add` whose operands are NHWC into an add of NHWC tensors (elementwise:
the op is the same). A layout conversion (`transpose`) stays only where the
region meets an NCHW tensor:

* an operand that is not NHWC already is transposed once, before its first
  NHWC reader; a `transpose` to NCHW (as the TFLite importer writes after an
  NHWC input) cancels instead, also through a per-tensor `qnn.quantize`;
* a result read by anything else is transposed back to NCHW; readers inside
  the region take the NHWC value, so the NCHW copies they no longer read
  are dead code; a reader that transposes it to NHWC again (an NHWC
  export) takes the NHWC value itself, also through per-tensor
  (de)quantization.

A transpose that only moves axes of size 1 (the channel of a one-channel
input, the 1 x 1 map of a global pool) keeps the order of the bytes, so it
is written as a `reshape`, which the executor gives the same memory.

Weights are constants: each convolution's flat weight is reordered here, at
compile time, to the (ky, kx, c) order its im2col lays out a window.
Whether a target wants the layout is the target's call (`wants_int8_nhwc`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..op import qnn
from ..op import qnn_add_pool as qap
from ..op import transform as tf
from ..op.qnn_nhwc import TO_NCHW, TO_NHWC, nhwc_weight, qavg_pool2d_nhwc, qconv2d_nhwc
from ..op.registry import Op
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import iter_calls, rewrite
from ..target.builtin import is_micro
from ..target.target import Target
from .infer_type import infer_expr, infer_function
from .pass_infra import FunctionPass, PassContext


def wants_int8_nhwc(target: Target) -> bool:
    """Channels innermost pay on microcontrollers: their int8 kernels are dot products over channel runs."""
    return target.kind.name == "c" and is_micro(target)


def _shape(e: Expr) -> tuple[int, ...] | None:
    ty = e.checked_type_
    return ty.shape if isinstance(ty, TensorType) else None


def _is_int8_4d(e: Expr) -> bool:
    ty = e.checked_type_
    return isinstance(ty, TensorType) and ty.dtype == "int8" and ty.ndim == 4


def _transpose(e: Expr, axes: tuple[int, ...], mod: IRModule | None) -> Expr:
    """transpose(e, axes), as a reshape when it keeps the order of the bytes."""
    shape = _shape(e)
    assert shape is not None
    moved = [a for a in axes if shape[a] != 1]
    if moved == sorted(moved):
        newshape = tuple(shape[a] for a in axes)
        source = e.args[0] if isinstance(e, Call) and e.op is tf.reshape else e
        call = Call(tf.reshape, (source,), tf.ReshapeAttrs(newshape))
    else:
        call = Call(tf.transpose, (e,), tf.TransposeAttrs(axes))
    return infer_expr(call, mod, incremental=True)


@dataclass
class _Region:
    """The rewrite's state: the NHWC value of every expression that has one (by identity)."""

    mod: IRModule | None
    nhwc: dict[int, Expr]
    keep: list[Expr]  # holds the keys' objects alive, so their ids stay unique

    def remember(self, nchw: Expr, nhwc: Expr) -> None:
        self.nhwc[id(nchw)] = nhwc
        self.keep.append(nchw)

    def has(self, e: Expr) -> bool:
        return id(e) in self.nhwc or self._cancelling(e) is not None

    def _cancelling(self, e: Expr) -> Expr | None:
        """The NHWC tensor `e` is a transpose of, looking through per-tensor quantization."""
        if not isinstance(e, Call):
            return None
        if e.op is tf.transpose and e.attrs_as(tf.TransposeAttrs).axes == TO_NCHW:
            return e.args[0]
        if e.op is qnn.quantize and _is_int8_4d(e) and _per_tensor(e):
            inner = self._cancelling(e.args[0])
            if inner is not None:
                return self.typed(Call(qnn.quantize, (inner, *e.args[1:]), e.attrs))
        return None

    def known(self, e: Expr) -> Expr | None:
        """The NHWC value of `e` if the region made one, looking through per-tensor (de)quantization:
        what a transpose back to NHWC after the region (an NHWC export) cancels against."""
        if id(e) in self.nhwc:
            return self.nhwc[id(e)]
        if isinstance(e, Call) and e.op in (qnn.quantize, qnn.dequantize) and _per_tensor(e):
            inner = self.known(e.args[0])
            if inner is not None:
                return self.typed(Call(e.op, (inner, *e.args[1:]), e.attrs))
        return None

    def as_nhwc(self, e: Expr) -> Expr:
        if id(e) in self.nhwc:
            return self.nhwc[id(e)]
        cancelled = self._cancelling(e)
        if cancelled is not None:
            return cancelled
        converted = _transpose(e, TO_NHWC, self.mod)
        self.remember(e, converted)  # one conversion however many readers
        return converted

    def typed(self, e: Expr) -> Expr:
        return infer_expr(e, self.mod, incremental=True)

    def result(self, nhwc: Expr) -> Expr:
        """The NCHW value of an NHWC result, for readers outside the region (dead code if none)."""
        nchw = _transpose(nhwc, TO_NCHW, self.mod)
        self.remember(nchw, nhwc)
        return nchw


def _per_tensor(q: Call) -> bool:
    return all(isinstance(p, Constant) and p.data.size == 1 for p in q.args[1:])


def _conv(call: Call, region: _Region) -> Expr:
    attrs = call.attrs_as(qnn.QConvAttrs)
    x, w, bias, mult = call.args
    assert isinstance(w, Constant)
    weight = Constant(nhwc_weight(w.data, attrs))
    return Call(qconv2d_nhwc, (region.as_nhwc(x), weight, bias, mult), attrs)


def _pool(call: Call, region: _Region) -> Expr:
    return Call(qavg_pool2d_nhwc, (region.as_nhwc(call.args[0]),), call.attrs)


def _add(call: Call, region: _Region) -> Expr | None:
    # elementwise: NHWC only when an operand already is, so the add adds no conversion of its own
    if not any(region.has(a) for a in call.args):
        return None
    return Call(qap.qadd, tuple(region.as_nhwc(a) for a in call.args), call.attrs)


_REWRITES = {qnn.qconv2d: _conv, qap.qavg_pool2d: _pool, qap.qadd: _add}


def _rewritable(call: Call) -> bool:
    if not (_is_int8_4d(call) and all(_is_int8_4d(a) for a in call.args[:1])):
        return False
    return call.op is not qnn.qconv2d or isinstance(call.args[1], Constant)


def _pays(call: Call) -> bool:
    """Whether the NHWC kernel of `call` is faster on a Cortex-M4 than its NCHW one. A depthwise
    (grouped) convolution's is not: its NCHW kernel slides two columns of a tap row per call
    (288,703 instructions for a kws layer), where NHWC took 515,871 as a scalar loop over taps and
    392,590 with four channels per SIMD word (SMLABB / SMLATT, in this branch's history)."""
    return call.op is not qnn.qconv2d or call.attrs_as(qnn.QConvAttrs).conv.groups == 1


def int8_layout(func: Function, mod: IRModule | None = None) -> Function:
    """`func` with its int8 region channels innermost (itself when it has none, or when one of its
    kernels is slower in NHWC: converting around it would cost two transposes per layer)."""
    original, func = func, infer_function(func, mod)
    if not all(_pays(c) for c in iter_calls(func.body) if c.op in _REWRITES):
        return original
    region = _Region(mod, {}, [])
    changed = False

    def visit(old: Expr, new: Expr) -> Expr | None:
        nonlocal changed
        if isinstance(new, Call) and new.op is tf.reshape and isinstance(new.args[0], Call) \
                and new.args[0].op is tf.reshape:  # e.g. a flatten of a global pool's NCHW view
            return region.typed(Call(tf.reshape, (new.args[0].args[0],), new.attrs))
        if isinstance(new, Call) and new.op is tf.transpose and new.attrs_as(tf.TransposeAttrs).axes == TO_NHWC:
            known = region.known(new.args[0])  # the NHWC result a reader outside wants back: no transposes
            if known is not None:
                return known
        if not (isinstance(old, Call) and isinstance(old.op, Op) and old.op in _REWRITES and _rewritable(old)):
            return None
        assert isinstance(new, Call)
        typed_children = Call(new.op, tuple(region.typed(a) for a in new.args), new.attrs)
        nhwc = _REWRITES[old.op](typed_children, region)
        if nhwc is None:
            return None
        changed = True
        return region.result(region.typed(nhwc))

    body = rewrite(func.body, visit)
    if not changed:
        return original
    # the NCHW copies no reader outside the region takes are unreachable now, so they are gone
    return infer_function(Function(func.params, body, func.ret_type, func.attrs), mod)


class Int8Layout(FunctionPass):
    """Runs `int8_layout` when `target` wants channels innermost (`wants_int8_nhwc`)."""

    name = "Int8Layout"
    opt_level = 0

    def __init__(self, target: Target) -> None:
        self.target = target

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return int8_layout(func, mod) if wants_int8_nhwc(self.target) else func
