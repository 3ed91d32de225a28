"""Channels-innermost (NHWC) forms of the int8 kernels: ``qnn.conv2d_nhwc`` and ``qnn.avg_pool2d_nhwc``.

`transform.int8_layout` rewrites the int8 region of a graph into these on
targets where channels innermost pay (Cortex-M): every position's channels
are then one contiguous run, which is what an int8 dot product reads.

* A 1x1 convolution reads its input directly (no copy into a position-major
  scratch, as the NCHW form needs).
* A k x k convolution's im2col copies one contiguous channel run per tap, and
  writes the input zero point where a tap falls into the padding: no padded
  copy of the input, and no index divided per byte.
* A grouped or depthwise convolution sums its taps from the same im2col, a
  scalar loop: correct, but slower on a Cortex-M4 than the NCHW depthwise
  kernel, so `transform.int8_layout` leaves graphs with them NCHW.

Attributes are those of the NCHW ops (`QConvAttrs`, `QPoolAttrs`); the
convolution's flat weight is (OC, KH * KW * C / groups) in the order
(ky, kx, c), the order the im2col lays out each window, arranged when the
graph is compiled. The references run the NCHW references on transposed
operands, so both forms are checked against one definition.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import TypeInferenceError
from ..relay.ty import TensorType, Type
from ..tir import expr as E
from ._util import as_tensor
from .qnn import QConvAttrs, channel_requantize, dot_s8, qconv2d
from .qnn_add_pool import QPoolAttrs, pool_requantize, qavg_pool2d
from .registry import OpPattern, register_op
from .schedule_context import ScheduleContext

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def nhwc_weight(w: np.ndarray, attrs: QConvAttrs) -> np.ndarray:
    """The flat NCHW weight (OC, C * KH * KW) reordered to (OC, KH * KW * C): the NHWC window order."""
    oc, k = w.shape
    kh, kw = attrs.kernel
    return np.ascontiguousarray(w.reshape(oc, k // (kh * kw), kh, kw).transpose(0, 2, 3, 1).reshape(oc, k))


def nchw_weight(w: np.ndarray, attrs: QConvAttrs) -> np.ndarray:
    """The inverse of `nhwc_weight`."""
    oc, k = w.shape
    kh, kw = attrs.kernel
    return np.ascontiguousarray(w.reshape(oc, kh, kw, k // (kh * kw)).transpose(0, 3, 1, 2).reshape(oc, k))


def _nchw(t: TensorType) -> TensorType:
    return TensorType(tuple(t.shape[a] for a in TO_NCHW), t.dtype)


def _nhwc(t: Type) -> TensorType:
    t = as_tensor(t)
    return TensorType(tuple(t.shape[a] for a in TO_NHWC), t.dtype)


def _checked_4d(x: TensorType, what: str) -> None:
    if x.ndim != 4:
        raise TypeInferenceError(f"{what} needs NHWC data, got {x.shape}")


def _qconv_type(types: tuple[Type, ...], attrs: QConvAttrs) -> Type:
    x = as_tensor(types[0])
    _checked_4d(x, "qnn.conv2d_nhwc")
    return _nhwc(qconv2d.type_rel((_nchw(x), *types[1:]), attrs))


def _qconv_ref(args: list[np.ndarray], attrs: QConvAttrs) -> np.ndarray:
    x, w, bias, mult = args
    y = qconv2d.reference([x.transpose(TO_NCHW), nchw_weight(w, attrs), bias, mult], attrs)
    return np.ascontiguousarray(np.asarray(y).transpose(TO_NHWC))


def _scaled(v: E.PrimExpr, k: int) -> E.PrimExpr:
    return v if k == 1 else E.mul(v, k)


def _im2col(data: te.Tensor, attrs: QConvAttrs, out: TensorType) -> te.Tensor:
    """col[n, y, x, ky, kx, c]: the window of output position (y, x) as one run of KH * KW * C.
    The channel loop is innermost, so every tap copies one contiguous run; a tap in the padding
    stores the input zero point (the bounds tests do not depend on c, so gcc hoists them)."""
    a = attrs.conv
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, a.strides, a.dilation
    _, h, w, c = data.shape
    top, left = a.padding[0], a.padding[1]
    zero = E.const(attrs.input_zero_point, "int8")

    def element(n: E.Var, y: E.Var, x: E.Var, ky: E.Var, kx: E.Var, ch: E.Var) -> E.PrimExpr:
        iy = E.add(_scaled(y, sh), _scaled(ky, dh))
        ix = E.add(_scaled(x, sw), _scaled(kx, dw))
        inside: E.PrimExpr = E.IntImm(1, "bool")
        coords = []
        for v, begin, end, size in ((iy, top, a.padding[2], h), (ix, left, a.padding[3], w)):
            if begin or end:
                inside = E.logical_and(inside, E.logical_and(E.ge(v, begin), E.lt(v, begin + size)))
                # clamped so the read stays in bounds even where the select discards it
                v = E.minimum(E.maximum(E.sub(v, begin), 0), size - 1)
            coords.append(v)
        return E.select(inside, data[n, coords[0], coords[1], ch], zero)

    return te.compute((out.shape[0], out.shape[1], out.shape[2], kh, kw, c), element, name="im2col",
                      axis_names=["n", "y", "x", "ky", "kx", "c"], materialize=True)


def _qconv_compute(inputs: list[te.Tensor], attrs: QConvAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    """One fused kernel per convolution, as `qnn.conv2d`, over channels-innermost tensors."""
    data, weight, bias, mult = inputs
    a = attrs.conv
    (kh, kw), (sh, sw) = attrs.kernel, a.strides
    direct = (kh, kw) == (1, 1) and not any(a.padding)
    if a.groups == 1:
        rk = te.reduce_axis(weight.shape[1], "rk")
        if direct:
            def window(b: E.Var, y: E.Var, x: E.Var, c: E.Var) -> E.PrimExpr:
                # each position's channels are one contiguous run of the input itself
                return te.sum(dot_s8(data[b, _scaled(y, sh), _scaled(x, sw), rk.var], weight[c, rk.var]), rk)
        else:
            col = _im2col(data, attrs, out)

            def window(b: E.Var, y: E.Var, x: E.Var, c: E.Var) -> E.PrimExpr:
                return te.sum(dot_s8(col[b, y, x, 0, 0, rk.var], weight[c, rk.var]), rk)
        order: list[str] | None = ["n", "o0", "o1", "c", "rk"]
        unroll: tuple[str, ...] = ()
    else:
        icpg = data.shape[3] // a.groups
        ocpg = out.shape[3] // a.groups
        col = _im2col(data, attrs, out)
        rc, ry, rx = te.reduce_axis(icpg, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

        def window(b: E.Var, y: E.Var, x: E.Var, c: E.Var) -> E.PrimExpr:
            channel = E.add(E.mul(E.floordiv(c, ocpg), icpg), rc.var) if icpg > 1 or ocpg > 1 else c
            tap = E.add(E.mul(E.add(E.mul(ry.var, kw), rx.var), icpg), rc.var)
            return te.sum(dot_s8(col[b, y, x, ry.var, rx.var, channel], weight[c, tap]), [ry, rx, rc])
        order = None
        unroll = ("ry", "rx") if icpg == 1 else ()
    acc = te.compute(out.shape, window, name="qconv2d", axis_names=["n", "o0", "o1", "c"], loop_order=order,
                     unroll=unroll)
    r = attrs.requant

    def element(b: E.Var, y: E.Var, x: E.Var, c: E.Var) -> E.PrimExpr:
        return channel_requantize(E.add(acc[b, y, x, c], bias[c]), mult, c, r)

    return te.compute(out.shape, element, name="requantize", axis_names=["n", "o0", "o1", "c"])


# OUT_ELEMWISE_FUSABLE: a residual qnn.add (or other elementwise tail) runs in the requantising epilogue,
# so the convolution's int8 output is never stored
qconv2d_nhwc = register_op(
    "qnn.conv2d_nhwc", type_rel=_qconv_type, reference=_qconv_ref, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    compute=_qconv_compute, attrs=QConvAttrs, num_inputs=4,
    doc="qnn.conv2d on NHWC data with a flat (OC, KH*KW*C/groups) weight in (ky, kx, c) order.",
)


def _qpool_type(types: tuple[Type, ...], attrs: QPoolAttrs) -> Type:
    x = as_tensor(types[0])
    _checked_4d(x, "qnn.avg_pool2d_nhwc")
    return _nhwc(qavg_pool2d.type_rel((_nchw(x),), attrs))


def _qpool_ref(args: list[np.ndarray], attrs: QPoolAttrs) -> np.ndarray:
    y = qavg_pool2d.reference([args[0].transpose(TO_NCHW)], attrs)
    return np.ascontiguousarray(np.asarray(y).transpose(TO_NHWC))


def _qpool_compute(inputs: list[te.Tensor], attrs: QPoolAttrs, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x = inputs[0]
    p = attrs.pool
    rk = [te.reduce_axis(k, f"rk{j}") for j, k in enumerate(p.kernel)]
    zp = E.const(attrs.input_zero_point, "int32")

    def window(n: E.Var, oh: E.Var, ow: E.Var, c: E.Var) -> E.PrimExpr:
        v = x[n, E.add(_scaled(oh, p.strides[0]), rk[0].var), E.add(_scaled(ow, p.strides[1]), rk[1].var), c]
        return te.sum(E.sub(E.cast(v, "int32"), zp), rk)

    total = te.compute(out.shape, window, name="qpool_sum", axis_names=["n", "o0", "o1", "c"])

    return te.compute(out.shape, lambda *i: pool_requantize(total[i], attrs), name="qpool")


qavg_pool2d_nhwc = register_op(
    "qnn.avg_pool2d_nhwc", type_rel=_qpool_type, reference=_qpool_ref, pattern=OpPattern.OPAQUE,
    compute=_qpool_compute, attrs=QPoolAttrs, num_inputs=1,
    doc="qnn.avg_pool2d on NHWC data.",
)
