"""RecogniseActivations: activations exported as several operators become one.

Exporters write SiLU, GELU and hard-swish out of primitives that read their
input twice:

    SiLU          x * Sigmoid(x)
    hard-swish    x * HardSigmoid(x) (alpha 1/6, beta 1/2), x * Clip(x + 3, 0, 6) / 6
    GELU (erf)    0.5 * x * (1 + Erf(x / sqrt 2))          (any order of the products)
    GELU (tanh)   0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3))))

A value with two readers ends a fusion group (FuseOps), so each of these
tails used to run as kernels of their own after the convolution or matrix
product that made x, with x stored and read back. As one elementwise
operator (`nn.silu`, `nn.hard_swish`, `nn.gelu`) the whole tail runs in the
producer's epilogue.

Each entry of `TABLE` is a dataflow pattern and the operator it becomes. The
constants must match to within float32 rounding of the exporters' values
(RELATIVE_TOLERANCE), so hand-written variants with other coefficients stay
as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..op import elemwise as ew
from ..relay.dataflow_pattern import Pattern, is_constant, is_op, wildcard
from ..relay.expr import Call, Constant, Expr, Function
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import rewrite
from .infer_type import infer_function
from .pass_infra import FunctionPass, PassContext

RELATIVE_TOLERANCE = 1e-5


def scalar(value: float) -> Pattern:
    """A constant holding one element equal to `value` (to RELATIVE_TOLERANCE)."""

    def close(e: Expr) -> bool:
        if not isinstance(e, Constant) or e.data.size != 1 or e.data.dtype.kind != "f":
            return False
        return math.isclose(float(e.data.reshape(())), value, rel_tol=RELATIVE_TOLERANCE)

    return is_constant().check(close, f"the constant {value}")


def commutative(op: str, a: Pattern, b: Pattern) -> Pattern:
    return is_op(op)(a, b) | is_op(op)(b, a)


def product3(a: Pattern, b: Pattern, c: Pattern) -> Pattern:
    """a * b * c, multiplied in any order and grouping."""
    alternatives = [commutative("multiply", single, commutative("multiply", u, v))
                    for single, u, v in ((a, b, c), (b, a, c), (c, a, b))]
    out = alternatives[0]
    for alt in alternatives[1:]:
        out = out | alt
    return out


@dataclass(frozen=True)
class Recognised:
    """A pattern whose wildcard `x` is the activation's input, and how to build the one operator."""

    name: str
    pattern: Pattern
    x: Pattern
    build: Callable[[Expr], Expr]


def _silu() -> Recognised:
    x = wildcard()
    return Recognised("silu", commutative("multiply", x, is_op("sigmoid")(x)), x, ew.silu)


def _hard_swish() -> Recognised:
    x = wildcard()
    hard_sigmoid = is_op("nn.hard_sigmoid")(x).check(
        lambda e: isinstance(e, Call) and math.isclose(getattr(e.attrs, "alpha", 0.0), 1 / 6, rel_tol=1e-6)
        and getattr(e.attrs, "beta", 0.0) == 0.5, "alpha 1/6, beta 1/2")
    relu6 = is_op("minimum")(is_op("maximum")(commutative("add", x, scalar(3.0)), scalar(0.0)), scalar(6.0))
    divided = (is_op("divide")(commutative("multiply", x, relu6), scalar(6.0))
               | commutative("multiply", x, is_op("divide")(relu6, scalar(6.0))))
    return Recognised("hard_swish", commutative("multiply", x, hard_sigmoid) | divided, x, ew.hard_swish)


def _gelu_erf() -> Recognised:
    x = wildcard()
    scaled = is_op("divide")(x, scalar(math.sqrt(2.0))) | commutative("multiply", x, scalar(math.sqrt(0.5)))
    one_plus = commutative("add", is_op("erf")(scaled), scalar(1.0))
    return Recognised("gelu", product3(scalar(0.5), x, one_plus), x, lambda v: ew.gelu(v, approximate="none"))


def _gelu_tanh() -> Recognised:
    x = wildcard()
    cube = (is_op("power")(x, scalar(3.0)) | commutative("multiply", x, commutative("multiply", x, x)))
    inner = commutative("add", x, commutative("multiply", scalar(0.044715), cube))
    one_plus = commutative("add", is_op("tanh")(commutative("multiply", scalar(math.sqrt(2 / math.pi)), inner)),
                           scalar(1.0))
    return Recognised("gelu_tanh", product3(scalar(0.5), x, one_plus), x, lambda v: ew.gelu(v, approximate="tanh"))


TABLE: tuple[Recognised, ...] = (_silu(), _hard_swish(), _gelu_erf(), _gelu_tanh())


def _float_tensor(e: Expr) -> bool:
    ty = e.checked_type_
    return isinstance(ty, TensorType) and np.dtype(ty.dtype).kind == "f"


def recognise(func: Function, mod: IRModule | None = None) -> Function:
    """`func` with every activation of TABLE written as its one operator."""
    func = infer_function(func, mod)

    def visit(old: Expr, new: Expr) -> Expr | None:
        if not isinstance(old, Call) or not _float_tensor(old):
            return None
        for entry in TABLE:
            # matched on the rebuilt call: x is then the rewritten input, shared by both its readers
            found = entry.pattern.match(new)
            if found is not None:
                return entry.build(found[entry.x])
        return None

    return infer_function(rewrite(func, visit), mod)


class RecogniseActivations(FunctionPass):
    name = "RecogniseActivations"
    opt_level = 1

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if func.attrs.primitive or func.attrs.compiler:
            return func
        return recognise(func, mod)
