"""Converters for elementwise math, comparisons, logic and casts.

Most ONNX elementwise operators map one-to-one onto a Relay op; they are
registered from tables (op type -> Relay op, first opset). Operators with
attributes, optional inputs or variadic inputs have their own converters;
activations are in math_activation.py.
"""

from __future__ import annotations

import onnx

from ....op import elemwise as ew
from ....op import transform as tf
from ....op.registry import Op
from ....relay.expr import Expr
from ..importer import ImportContext, Node, onnx_dtype
from ..registry import converter
from .common import scalar

# op type -> (Relay op, opset that introduced the op type)
UNARY: dict[str, tuple[Op, int]] = {
    "Abs": (ew.abs, 1), "Neg": (ew.negative, 1), "Reciprocal": (ew.reciprocal, 1),
    "Exp": (ew.exp, 1), "Log": (ew.log, 1), "Sqrt": (ew.sqrt, 1), "Erf": (ew.erf, 9),
    "Sin": (ew.sin, 7), "Cos": (ew.cos, 7), "Tan": (ew.tan, 7),
    "Asin": (ew.asin, 7), "Acos": (ew.acos, 7), "Atan": (ew.atan, 7),
    "Sinh": (ew.sinh, 9), "Cosh": (ew.cosh, 9),
    "Asinh": (ew.asinh, 9), "Acosh": (ew.acosh, 9), "Atanh": (ew.atanh, 9),
    "Floor": (ew.floor, 1), "Ceil": (ew.ceil, 1), "Round": (ew.round, 11), "Sign": (ew.sign, 9),
    "Sigmoid": (ew.sigmoid, 1), "Tanh": (ew.tanh, 1),
    "Not": (ew.logical_not, 1), "BitwiseNot": (ew.bitwise_not, 18), "IsNaN": (ew.isnan, 9),
}

BINARY: dict[str, tuple[Op, int]] = {
    "Add": (ew.add, 1), "Sub": (ew.subtract, 1), "Mul": (ew.multiply, 1), "Div": (ew.divide, 1),
    "Pow": (ew.power, 1),
    "Equal": (ew.equal, 1), "Less": (ew.less, 1), "Greater": (ew.greater, 1),
    "LessOrEqual": (ew.less_equal, 12), "GreaterOrEqual": (ew.greater_equal, 12),
    "And": (ew.logical_and, 1), "Or": (ew.logical_or, 1), "Xor": (ew.logical_xor, 1),
    "BitwiseAnd": (ew.bitwise_and, 18), "BitwiseOr": (ew.bitwise_or, 18),
    "BitwiseXor": (ew.bitwise_xor, 18),
}

# variadic op type -> the binary op that folds its inputs
VARIADIC: dict[str, Op] = {"Sum": ew.add, "Max": ew.maximum, "Min": ew.minimum, "Mean": ew.add}


def _register_unary(op_type: str, op: Op, since: int) -> None:
    @converter(op_type, since=since)
    def convert(node: Node, ctx: ImportContext) -> Expr:
        return op(node.input(0))


def legacy_broadcast(node: Node, ctx: ImportContext, b: Expr) -> Expr:
    """Before opset 7, `broadcast=1` with `axis` aligns B's dims with A's from
    that axis on; reshaping B with trailing ones gives NumPy semantics."""
    if node.opset >= 7 or not int(node.attr("broadcast", 0)) or "axis" not in node.attrs:
        return b
    a_rank = len(ctx.shape_of(node.input(0)))
    b_shape = ctx.shape_of(b)
    axis = int(node.attrs["axis"])
    axis = axis + a_rank if axis < 0 else axis
    if not 0 <= axis <= a_rank - len(b_shape):
        raise node.error(f"broadcast axis {axis} does not fit B of shape {b_shape} into rank {a_rank}")
    trailing = a_rank - axis - len(b_shape)
    return tf.reshape(b, newshape=tuple(b_shape) + (1,) * trailing) if trailing else b


def _register_binary(op_type: str, op: Op, since: int) -> None:
    @converter(op_type, since=since)
    def convert(node: Node, ctx: ImportContext) -> Expr:
        return op(node.input(0), legacy_broadcast(node, ctx, node.input(1)))


def _register_variadic(op_type: str, op: Op) -> None:
    @converter(op_type, since=1)
    def convert(node: Node, ctx: ImportContext) -> Expr:
        inputs = [node.input(k) for k in range(len(node.inputs))]
        if not inputs:
            raise node.error("needs at least one input")
        out = inputs[0]
        for x in inputs[1:]:
            out = op(out, x)
        if op_type == "Mean" and len(inputs) > 1:
            out = ew.divide(out, scalar(len(inputs), ctx.dtype_of(out)))
        return out


for _name, (_op, _since) in UNARY.items():
    _register_unary(_name, _op, _since)
for _name, (_op, _since) in BINARY.items():
    _register_binary(_name, _op, _since)
for _name, _op in VARIADIC.items():
    _register_variadic(_name, _op)


@converter("Identity", since=1)
def identity(node: Node, ctx: ImportContext) -> Expr:
    return node.input(0)


@converter("IsInf", since=10)
def isinf(node: Node, ctx: ImportContext) -> Expr:
    return ew.isinf(node.input(0), detect_positive=bool(node.attr("detect_positive", 1)),
                    detect_negative=bool(node.attr("detect_negative", 1)))


# ----------------------------------------------------------- integer ops
MOD_KINDS: dict[int, Op] = {0: ew.floor_mod, 1: ew.trunc_mod}


@converter("Mod", since=10)
def mod(node: Node, ctx: ImportContext) -> Expr:
    fmod = int(node.attr("fmod", 0))
    if fmod not in MOD_KINDS:
        raise node.error(f"fmod={fmod} is not valid; expected 0 (sign of the divisor) or 1 (C fmod)")
    return MOD_KINDS[fmod](node.input(0), node.input(1))


SHIFTS: dict[str, Op] = {"LEFT": ew.left_shift, "RIGHT": ew.right_shift}


@converter("BitShift", since=11)
def bit_shift(node: Node, ctx: ImportContext) -> Expr:
    direction = node.attr("direction")
    if direction not in SHIFTS:
        raise node.error(f"direction={direction!r} is not valid; expected 'LEFT' or 'RIGHT'")
    return SHIFTS[direction](node.input(0), node.input(1))


# ------------------------------------------------------------------ casts
def cast_target(node: Node, to: int | str) -> str:
    """The dtype named by Cast's `to` (a TensorProto enum; a type name before opset 6)."""
    if isinstance(to, str):
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise node.error(f"to={to!r} is not an ONNX data type") from None
    return onnx_dtype(int(to), f"{node.describe()}: cast target")


@converter("Cast", since=1)
def cast(node: Node, ctx: ImportContext) -> Expr:
    # `saturate` and `round_mode` only concern float8 targets, which tessera lacks.
    x, dtype = node.input(0), cast_target(node, node.attr("to"))
    return x if ctx.dtype_of(x) == dtype else ew.cast(x, dtype=dtype)


@converter("CastLike", since=15)
def cast_like(node: Node, ctx: ImportContext) -> Expr:
    # a float16/bfloat16 `like` is computed in float32: its type in the model is the target
    x, dtype = node.input(0), node.stored_dtype(1) or ctx.dtype_of(node.input(1))
    return x if ctx.dtype_of(x) == dtype else ew.cast(x, dtype=dtype)


# ------------------------------------------------------------------- where
@converter("Where", since=9)
def where(node: Node, ctx: ImportContext) -> Expr:
    return ew.where(node.input(0), node.input(1), node.input(2))


__all__ = ["BINARY", "UNARY", "VARIADIC", "cast_target", "legacy_broadcast"]
