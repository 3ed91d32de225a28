"""Converters for quantized models, in both forms onnxruntime writes.

* QDQ: ``QuantizeLinear`` / ``DequantizeLinear`` become ``qnn.quantize`` /
  ``qnn.dequantize`` around the float ops;
* operator form (``QLinearConv``, ``QLinearMatMul``, and the com.microsoft
  ``QLinearAdd``, ``QLinearMul``, ``QGemm``, ``QLinearAveragePool``,
  ``QLinearGlobalAveragePool``, ``QLinearSoftmax``): each is written as the
  same canonical form, dequantize -> the float op (by its own converter) ->
  quantize, because that is what ONNX defines them to compute.

Either way `transform.quantize_to_integer` then turns the patterns into
integer kernels. Scales and zero points must be compile-time constants.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ....op import qnn
from ....relay.expr import Constant, Expr
from ..importer import ImportContext, Node
from ..registry import converter
from . import nn

MS = "com.microsoft"
_QUANT_DTYPES = ("int8", "uint8")


def _params(node: Node, ctx: ImportContext, k_scale: int, k_zp: int, dtype: str, what: str) -> tuple[Constant, Constant]:
    """Scale and zero point of a (de)quantisation as constants (zero point defaults to 0 of `dtype`)."""
    scale = np.asarray(ctx.constant(node.input(k_scale), f"the {what} scale"))
    if scale.dtype != np.float32:
        raise node.error(f"the {what} scale must be float32, got {scale.dtype}")
    if scale.ndim > 1:
        raise node.error(f"the {what} scale has shape {scale.shape}: blocked quantisation is not supported "
                         "(per-tensor and per-axis are)")
    zp_expr = node.optional_input(k_zp)
    zp = (np.zeros(scale.shape, dtype) if zp_expr is None
          else np.asarray(ctx.constant(zp_expr, f"the {what} zero point")))
    if zp.dtype.name != dtype:
        raise node.error(f"the {what} zero point is {zp.dtype}, expected {dtype}")
    if zp.shape != scale.shape:
        raise node.error(f"the {what} scale {scale.shape} and zero point {zp.shape} shapes differ")
    return Constant(scale.reshape(-1)), Constant(zp.reshape(-1))


def _axis(node: Node, ctx: ImportContext, x: Expr) -> int:
    ndim = len(ctx.shape_of(x))
    axis = int(node.attr("axis", 1))
    return axis + ndim if axis < 0 else axis


def _dequantize(node: Node, ctx: ImportContext, k: int, what: str, axis: int = 1) -> Expr:
    """Input k dequantised with inputs k+1 (scale) and k+2 (zero point)."""
    x = node.input(k)
    dtype = ctx.dtype_of(x)
    if dtype not in (*_QUANT_DTYPES, "int32"):
        raise node.error(f"{what} is {dtype}; tessera dequantises int8, uint8 and int32")
    scale, zp = _params(node, ctx, k + 1, k + 2, dtype, what)
    return qnn.dequantize(x, scale, zp, axis=axis)


def _quantize(node: Node, ctx: ImportContext, y: Expr, k_scale: int, k_zp: int, default: str = "uint8") -> Expr:
    zp_in = node.optional_input(k_zp)
    dtype = default if zp_in is None else ctx.dtype_of(zp_in)
    if dtype not in _QUANT_DTYPES:
        raise node.error(f"the output zero point is {dtype}; tessera quantises to int8 and uint8")
    scale, zp = _params(node, ctx, k_scale, k_zp, dtype, "output")
    return qnn.quantize(y, scale, zp, axis=1, out_dtype=dtype)


@converter("QuantizeLinear", since=10)
def quantize_linear(node: Node, ctx: ImportContext) -> Expr:
    node.reject_attrs(block_size=0, saturate=1)
    x = node.input(0)
    if ctx.dtype_of(x) != "float32":
        raise node.error(f"input is {ctx.dtype_of(x)}; tessera quantises float32")
    out_dtype = node.attr("output_dtype", 0)
    if out_dtype:
        raise node.error("the output_dtype attribute is not supported; give a zero point of the wanted type")
    zp_in = node.optional_input(2)
    dtype = "uint8" if zp_in is None else ctx.dtype_of(zp_in)
    if dtype not in _QUANT_DTYPES:
        raise node.error(f"quantising to {dtype} is not supported (int8 and uint8 are)")
    scale, zp = _params(node, ctx, 1, 2, dtype, "output")
    return qnn.quantize(x, scale, zp, axis=_axis(node, ctx, x), out_dtype=dtype)


@converter("DequantizeLinear", since=10)
def dequantize_linear(node: Node, ctx: ImportContext) -> Expr:
    node.reject_attrs(block_size=0)
    return _dequantize(node, ctx, 0, "the input", axis=_axis(node, ctx, node.input(0)))


def _as(node: Node, op_type: str, inputs: list[Expr | None], opset: int | None = None,
        drop: tuple[str, ...] = ()) -> Node:
    """`node` as the float op `op_type` with `inputs` (for that op's own converter)."""
    attrs = {k: v for k, v in node.attrs.items() if k not in drop}
    return replace(node, op_type=op_type, domain="", opset=opset or 13, inputs=inputs,
                   input_names=[f"{node.name}:{k}" for k in range(len(inputs))], attrs=attrs)


def _bias(node: Node, ctx: ImportContext, k: int, scale: np.ndarray) -> Expr | None:
    """Optional int32 bias input k, with scale `scale` (input scale x weight scales), zero point 0."""
    b = node.optional_input(k)
    if b is None:
        return None
    if ctx.dtype_of(b) != "int32":
        raise node.error(f"the bias is {ctx.dtype_of(b)}, expected int32")
    channels = ctx.shape_of(b)[0]
    s = np.broadcast_to(np.asarray(scale, np.float32).reshape(-1), (channels,)).astype(np.float32)
    return qnn.dequantize(b, Constant(s), Constant(np.zeros(channels, np.int32)), axis=0)


def _scale_value(node: Node, ctx: ImportContext, k: int) -> np.ndarray:
    return np.asarray(ctx.constant(node.input(k), "a scale"), np.float32)


@converter("QLinearConv", since=10)
def qlinear_conv(node: Node, ctx: ImportContext) -> Expr:
    x = _dequantize(node, ctx, 0, "the input")
    w = _dequantize(node, ctx, 3, "the weight", axis=0)
    bias = _bias(node, ctx, 8, _scale_value(node, ctx, 1) * _scale_value(node, ctx, 4))
    return _quantize(node, ctx, nn.conv(_as(node, "Conv", [x, w, bias]), ctx), 6, 7)


@converter("QLinearMatMul", since=10)
def qlinear_matmul(node: Node, ctx: ImportContext) -> Expr:
    a = _dequantize(node, ctx, 0, "input A", axis=0)
    b_rank = len(ctx.shape_of(node.input(3)))
    b = _dequantize(node, ctx, 3, "input B", axis=b_rank - 1)  # per-column scales
    return _quantize(node, ctx, nn.matmul(_as(node, "MatMul", [a, b]), ctx), 6, 7)


def _binary(node: Node, ctx: ImportContext, op_type: str) -> Expr:
    from ....op import elemwise as ew

    a, b = _dequantize(node, ctx, 0, "input A"), _dequantize(node, ctx, 3, "input B")
    y = ew.add(a, b) if op_type == "Add" else ew.multiply(a, b)
    return _quantize(node, ctx, y, 6, 7)


@converter("QLinearAdd", since=1, domain=MS)
def qlinear_add(node: Node, ctx: ImportContext) -> Expr:
    return _binary(node, ctx, "Add")


@converter("QLinearMul", since=1, domain=MS)
def qlinear_mul(node: Node, ctx: ImportContext) -> Expr:
    return _binary(node, ctx, "Mul")


@converter("QGemm", since=1, domain=MS)
def qgemm(node: Node, ctx: ImportContext) -> Expr:
    a = _dequantize(node, ctx, 0, "input A", axis=0)
    trans_b = int(node.attr("transB", 0))
    b = _dequantize(node, ctx, 3, "input B", axis=0 if trans_b else 1)
    alpha = float(node.attr("alpha", 1.0))
    bias = _bias(node, ctx, 6, _scale_value(node, ctx, 1) * _scale_value(node, ctx, 4) * np.float32(alpha))
    y = nn.gemm(_as(node, "Gemm", [a, b, bias]), ctx)
    if node.optional_input(7) is None:
        return y  # no output scale: the float result
    return _quantize(node, ctx, y, 7, 8)


def _channels_first(node: Node) -> None:
    if int(node.attr("channels_last", 0)):
        raise node.error("channels_last=1 is not supported (NCHW only)")


@converter("QLinearAveragePool", since=1, domain=MS)
def qlinear_average_pool(node: Node, ctx: ImportContext) -> Expr:
    _channels_first(node)
    x = _dequantize(node, ctx, 0, "the input")
    return _quantize(node, ctx, nn.average_pool(_as(node, "AveragePool", [x], drop=("channels_last",)), ctx), 3, 4)


@converter("QLinearGlobalAveragePool", since=1, domain=MS)
def qlinear_global_average_pool(node: Node, ctx: ImportContext) -> Expr:
    _channels_first(node)
    x = _dequantize(node, ctx, 0, "the input")
    y = nn.global_average_pool(_as(node, "GlobalAveragePool", [x], drop=("channels_last",)), ctx)
    return _quantize(node, ctx, y, 3, 4)


@converter("QLinearSoftmax", since=1, domain=MS)
def qlinear_softmax(node: Node, ctx: ImportContext) -> Expr:
    x = _dequantize(node, ctx, 0, "the input")
    opset = int(node.attr("opset", 13))
    y = nn.softmax_(_as(node, "Softmax", [x], opset=opset, drop=("opset",)), ctx)
    return _quantize(node, ctx, y, 3, 4)
