"""Generators for elementwise operators of one tensor input.

A `Unary` rule says how bounds map through the operator, how much rounding
error it may add (in units of the dtype's epsilon), the domain outside which
it gives NaN, and how much it amplifies its input's error. Outside the
domain it is only applied to exact inputs, whose NaN positions every
correct implementation agrees on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .graph import ALL_DTYPES, FLOATS, INTS, NUMERIC, SIGNED, UNSIGNED, Facts, GraphBuilder, Reject, Value, dtype_range
from .spec import MAX_AMP, exact_or, near_zero_amp, register, safe

F32 = ("float32",)  # onnxruntime implements many activations and trigonometry for float32 only
Interval = Callable[[float, float, dict], tuple[float, float]]
Attrs = Callable[[GraphBuilder], dict]


def increasing(f: Callable[[float], float]) -> Interval:
    return lambda lo, hi, a: (safe(f, lo), safe(f, hi))


def decreasing(f: Callable[[float], float]) -> Interval:
    return lambda lo, hi, a: (safe(f, hi), safe(f, lo))


def fixed(lo: float, hi: float) -> Interval:
    return lambda _lo, _hi, a: (lo, hi)


def floor_at(low: float) -> Interval:
    """Non-monotone near zero, bounded below by `low`, identity-like above."""
    return lambda lo, hi, a: (low, max(hi, 0.0))


def magnitude_amp(v: Value, a: dict) -> float:
    """Error amplification |x| of exp-like functions (relative error of f(x(1+e)))."""
    return max(1.0, min(v.magnitude, 100.0))


@dataclass(frozen=True)
class Unary:
    op: str
    dtypes: tuple[str, ...]
    interval: Interval
    ulps: float = 0.0
    domain: tuple[float, float] | None = None  # closed range giving finite results
    amp: Callable[[Value, dict], float] | None = None
    attrs: Attrs | None = None
    needs_exact: bool = False
    specials_ok: bool = False
    min_opset: int = 1
    bounded_input: float = math.inf  # inputs beyond this magnitude are ill-conditioned (periodic functions)
    ulps_of: str | None = None  # ulps counted in this dtype (an op defined with float32 constants)

    def build(self, g: GraphBuilder, v: Value) -> list[Value]:
        if v.magnitude > self.bounded_input and not v.exact:
            raise Reject(f"{self.op} of large inexact values is ill-conditioned")
        attrs = self.attrs(g) if self.attrs else {}
        inside = self.domain is None or (self.domain[0] <= v.lo and v.hi <= self.domain[1])
        if not inside and not v.exact:
            raise Reject(f"{self.op}: inexact input may cross the domain boundary")
        if inside:
            lo, hi = self.interval(v.lo, v.hi, attrs)
        else:
            lo, hi = -math.inf, math.inf
        amp = self.amp(v, attrs) if self.amp else 1.0
        if amp > MAX_AMP:
            raise Reject(f"{self.op} would amplify its input's rounding error too much")
        tol = exact_or(self.ulps_of or v.dtype, [v], self.ulps, amp)
        finite = v.finite and inside and not (math.isnan(lo) or math.isnan(hi))
        return g.node(self.op, [v], attrs, [{"lo": lo, "hi": hi, "finite": finite, "tol": tol}])


def _alpha(*choices: float) -> Attrs:
    return lambda g: {"alpha": g.chooser.choice(choices)}


def _elu_interval(lo: float, hi: float, a: dict) -> tuple[float, float]:
    alpha = a.get("alpha", 1.0)
    low = alpha * math.expm1(lo) if lo < 0 else lo
    return min(low, -alpha, 0.0), max(hi, 0.0)


def _selu_interval(lo: float, hi: float, a: dict) -> tuple[float, float]:
    alpha, gamma = a["alpha"], a["gamma"]
    return -gamma * alpha, max(gamma * hi, 0.0)


def _hard_sigmoid_attrs(g: GraphBuilder) -> dict:
    return {"alpha": g.chooser.choice((0.2, 0.5, 1.0)), "beta": g.chooser.choice((0.5, 0.25, 0.0))}


def _shrink_attrs(g: GraphBuilder) -> dict:
    return {"lambd": g.chooser.choice((0.0, 0.5, 1.5)), "bias": g.chooser.choice((0.0, 0.5, 1.0))}


def _shrink_interval(lo: float, hi: float, a: dict) -> tuple[float, float]:
    return min(0.0, lo + a["bias"]), max(0.0, hi - a["bias"])


def _leaky_interval(lo: float, hi: float, a: dict) -> tuple[float, float]:
    alpha = a["alpha"]
    return min(lo * alpha, lo, 0.0) if lo < 0 else lo, hi if hi > 0 else hi * alpha


def _reciprocal_interval(lo: float, hi: float, a: dict) -> tuple[float, float]:
    if lo > 0 or hi < 0:
        return safe(lambda x: 1 / x, hi), safe(lambda x: 1 / x, lo)
    return math.nan, math.nan  # zero is inside: infinities


TRIG_BOUND = 1e3  # sin/cos of larger values lose most of their digits to argument reduction

UNARY: tuple[Unary, ...] = (
    Unary("Abs", NUMERIC, lambda lo, hi, a: (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi))),
          specials_ok=True),
    Unary("Neg", FLOATS + SIGNED, decreasing(lambda x: -x), specials_ok=True),
    Unary("Relu", FLOATS + ("int8", "int32"), increasing(lambda x: max(x, 0.0))),
    Unary("Sign", NUMERIC, increasing(lambda x: float(np.sign(x))), needs_exact=True),
    Unary("Floor", FLOATS, increasing(math.floor), needs_exact=True),
    Unary("Ceil", FLOATS, increasing(math.ceil), needs_exact=True),
    Unary("Round", FLOATS, increasing(lambda x: float(np.round(x))), needs_exact=True, min_opset=11),
    Unary("Reciprocal", FLOATS, _reciprocal_interval, ulps=2, needs_exact=True),
    Unary("Sqrt", FLOATS, increasing(math.sqrt), ulps=2, domain=(0.0, math.inf),
          amp=lambda v, a: math.sqrt(near_zero_amp(v))),
    Unary("Exp", FLOATS, increasing(math.exp), ulps=64, amp=magnitude_amp),
    Unary("Log", FLOATS, increasing(lambda x: math.log(x) if x > 0 else -math.inf), ulps=64,
          domain=(1e-30, math.inf), amp=lambda v, a: near_zero_amp(v)),
    Unary("Sigmoid", FLOATS, fixed(0.0, 1.0), ulps=64),
    Unary("Tanh", FLOATS, fixed(-1.0, 1.0), ulps=64),
    Unary("Erf", F32, fixed(-1.0, 1.0), ulps=64, min_opset=9),
    Unary("Softplus", F32, lambda lo, hi, a: (0.0, max(hi, 0.0) + 1.0), ulps=64),
    Unary("Softsign", F32, fixed(-1.0, 1.0), ulps=4),
    Unary("Sin", FLOATS, fixed(-1.0, 1.0), ulps=64, amp=magnitude_amp, bounded_input=TRIG_BOUND, min_opset=7),
    Unary("Cos", FLOATS, fixed(-1.0, 1.0), ulps=64, amp=magnitude_amp, bounded_input=TRIG_BOUND, min_opset=7),
    Unary("Tan", F32, fixed(-1e8, 1e8), ulps=64, needs_exact=True, bounded_input=TRIG_BOUND, min_opset=7),
    Unary("Asin", F32, fixed(-1.6, 1.6), ulps=64, domain=(-1.0, 1.0), needs_exact=True, min_opset=7),
    Unary("Acos", F32, fixed(0.0, 3.2), ulps=64, domain=(-1.0, 1.0), needs_exact=True, min_opset=7),
    Unary("Atan", F32, fixed(-1.6, 1.6), ulps=64, min_opset=7),
    Unary("Sinh", F32, increasing(math.sinh), ulps=64, amp=magnitude_amp, min_opset=9),
    Unary("Cosh", F32, lambda lo, hi, a: (1.0, safe(math.cosh, max(abs(lo), abs(hi)))), ulps=64,
          amp=magnitude_amp, min_opset=9),
    Unary("Asinh", F32, increasing(math.asinh), ulps=64, min_opset=9),
    Unary("Acosh", F32, increasing(lambda x: math.acosh(max(x, 1.0))), ulps=64, domain=(1.0, math.inf),
          needs_exact=True, min_opset=9),
    Unary("Atanh", F32, fixed(-10.0, 10.0), ulps=64, domain=(-0.999, 0.999), needs_exact=True,
          min_opset=9),
    Unary("LeakyRelu", F32, _leaky_interval, ulps=1, attrs=_alpha(0.01, 0.2, 1.5)),
    Unary("Elu", F32, _elu_interval, ulps=64, attrs=_alpha(1.0, 0.5, 2.0)),
    Unary("Celu", F32, _elu_interval, ulps=64, attrs=_alpha(1.0, 0.5, 2.0), min_opset=12),
    Unary("Selu", F32, _selu_interval, ulps=64,
          attrs=lambda g: {"alpha": g.chooser.choice((1.67326, 1.0)), "gamma": g.chooser.choice((1.0507, 2.0))}),
    Unary("HardSigmoid", F32, fixed(0.0, 1.0), ulps=4, attrs=_hard_sigmoid_attrs),
    Unary("HardSwish", F32, floor_at(-0.375), ulps=4, min_opset=14, ulps_of="float32"),  # alpha = (float)1/6
    Unary("Mish", F32, floor_at(-0.31), ulps=64, min_opset=18),
    Unary("ThresholdedRelu", F32, lambda lo, hi, a: (min(lo, 0.0), max(hi, 0.0)), attrs=_alpha(1.0, 0.5, 0.0),
          needs_exact=True, min_opset=10),
    Unary("Shrink", FLOATS, _shrink_interval, ulps=1, attrs=_shrink_attrs, needs_exact=True, min_opset=9,
          ulps_of="float32"),  # onnxruntime subtracts the (float) bias in float32 for doubles too
    Unary("Gelu", F32, floor_at(-0.17), ulps=64, min_opset=20,
          attrs=lambda g: {"approximate": g.chooser.choice(("none", "tanh"))}),
    Unary("Identity", ALL_DTYPES, lambda lo, hi, a: (lo, hi), specials_ok=True),
)

for _rule in UNARY:
    register(_rule.op, "unary", dtypes=_rule.dtypes, needs_exact=_rule.needs_exact, specials_ok=_rule.specials_ok,
             min_opset=_rule.min_opset)(_rule.build)


# ---------------------------------------------------- forms of their own
@register("Not", "unary", dtypes=("bool",))
def _not(g: GraphBuilder, v: Value) -> list[Value]:
    return g.node("Not", [v])


@register("BitwiseNot", "unary", dtypes=INTS, min_opset=18)
def _bitwise_not(g: GraphBuilder, v: Value) -> list[Value]:
    if v.dtype in UNSIGNED:
        top = dtype_range(v.dtype)[1]
        lo, hi = top - v.hi, top - v.lo
    else:
        lo, hi = -v.hi - 1, -v.lo - 1
    return g.node("BitwiseNot", [v], outputs=[{"lo": lo, "hi": hi, "finite": True}])


@register("IsNaN", "unary", dtypes=FLOATS, specials_ok=True, min_opset=9)
def _isnan(g: GraphBuilder, v: Value) -> list[Value]:
    return g.node("IsNaN", [v])


@register("IsInf", "unary", dtypes=FLOATS, specials_ok=True, min_opset=10)
def _isinf(g: GraphBuilder, v: Value) -> list[Value]:
    if not (v.finite or v.exact):
        raise Reject("IsInf of an inexact value near overflow")
    attrs = {"detect_negative": g.chooser.choice((0, 1)), "detect_positive": g.chooser.choice((0, 1))}
    return g.node("IsInf", [v], attrs)


@register("Clip", "unary", dtypes=tuple(d for d in NUMERIC if d not in ("int16", "uint16")))
def _clip(g: GraphBuilder, v: Value) -> list[Value]:
    """Bounds from the input's own range, so clipping does something; a bound may be missing."""
    span = v.hi - v.lo if math.isfinite(v.hi - v.lo) else 8.0
    base = v.lo if math.isfinite(v.lo) else -4.0
    lo = base + span * g.chooser.choice((0.25, 0.5)) if g.chooser.boolean(0.8) else None
    hi = base + span * g.chooser.choice((0.5, 0.75, 1.5)) if g.chooser.boolean(0.8) else None
    if v.dtype in INTS:  # integral bounds inside the dtype (Python ints: float(2**64 - 1) rounds up)
        info = np.iinfo(v.dtype)
        lo = None if lo is None else min(max(math.floor(lo), int(info.min)), int(info.max))
        hi = None if hi is None else min(max(math.ceil(hi), int(info.min)), int(info.max))
    if g.opset < 11:
        if v.dtype != "float32":
            raise Reject("Clip before opset 11 takes float only")
        attrs = {k: float(b) for k, b in (("min", lo), ("max", hi)) if b is not None}
        inputs: list[Value | None] = [v]
    else:
        attrs = {}
        inputs = [v]
        for bound in (lo, hi):
            if bound is None:
                inputs.append(None)
                continue
            data = np.asarray(bound, dtype=v.dtype)
            run_time = g.chooser.boolean(0.4)  # bounds computed at run time are valid too
            inputs.append(g.input(data) if run_time else g.scalar(bound, v.dtype))
        while inputs[-1] is None:
            inputs.pop()
    out_lo = v.lo if lo is None else max(v.lo, lo)
    out_hi = v.hi if hi is None else min(v.hi, hi)
    if lo is not None and hi is not None and lo > hi:  # min(max(x, lo), hi) = hi everywhere
        out_lo = out_hi = hi
    return g.node("Clip", inputs, attrs, [{"lo": min(out_lo, out_hi), "hi": max(out_lo, out_hi),
                                           "finite": v.finite, "tol": v.tol}])


@register("Dropout", "unary", dtypes=FLOATS, specials_ok=True)
def _dropout(g: GraphBuilder, v: Value) -> list[Value]:
    """Inference mode: the identity, and an all-true mask if asked for."""
    outputs: list[Facts] = [{"lo": v.lo, "hi": v.hi, "finite": v.finite, "tol": v.tol}]
    if g.opset >= 12 and g.chooser.boolean(0.3):
        outputs.append({})
    return g.node("Dropout", [v], outputs=outputs)[:1]
