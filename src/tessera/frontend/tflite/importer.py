"""TFLite flatbuffer -> Relay IRModule.

The importer walks the operators of the main subgraph in order and hands
each to the converter registered for its builtin name (`registry.py`), which
returns the `Value` of each output.

Layout. TFLite is NHWC; tessera's convolutions and pools are NCHW (like the
ONNX importer's output, so the int8 kernels are shared). A 4-d value may be
held transposed, channels first (`Value.channels_first`): convolutions and
pools produce it, element-wise ops, PAD, MEAN and CONCATENATION keep it (with
their axes renumbered), and any other op asks for the NHWC form, which costs a
transpose. So a chain of convolutions never leaves NCHW, and graph inputs and
outputs keep TFLite's NHWC shapes.

Quantisation. An int8 tensor stays int8. A converter computes the float op
on `Operator.dequantized(k)` and hands the result to `Operator.quantized`,
which makes the QDQ form the ONNX importer makes, with the quantize marked
``Rounding.TFLITE``; `transform.quantize_to_integer` then turns each pattern
into the integer kernel computing what LiteRT computes. Data-movement ops
(RESHAPE, TRANSPOSE, ...) move the int8 values themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConversionError, TesseraError
from ...op import qnn
from ...op import transform as tf
from ...op.qnn_rounding import Rounding
from ...relay.expr import Call, Constant, Expr, FuncAttrs, Function, Tuple, Var
from ...relay.module import IRModule
from ...relay.ty import TensorType
from ...transform.fold_constant import fold_expr
from ...transform.infer_type import infer_expr, infer_function
from .reader import OperatorInfo, Quantization, TensorInfo, TFLiteGraph, read_file, read_graph
from .registry import CONVERTERS

TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)
NHWC_AXIS_IN_NCHW = (0, 2, 3, 1)  # NHWC axis k is axis NHWC_AXIS_IN_NCHW[k] of the NCHW form


@dataclass(frozen=True)
class Value:
    """A converted tensor; a 4-d one may be held channels first (NCHW) instead of TFLite's NHWC."""

    expr: Expr
    channels_first: bool = False


def _typed(expr: Expr) -> Expr:
    return infer_expr(expr, incremental=True)


def shape_of(expr: Expr) -> tuple[int, ...]:
    ty = _typed(expr).checked_type
    if not isinstance(ty, TensorType):
        raise ConversionError(f"expected a tensor, got {ty}")
    return ty.shape


def _transposed(expr: Expr, perm: tuple[int, ...]) -> Expr:
    inverse = tuple(int(k) for k in np.argsort(perm))
    if isinstance(expr, Call) and expr.op is tf.transpose and tuple(expr.attrs_as(tf.TransposeAttrs).axes) == inverse:
        return expr.args[0]  # undo the importer's own transpose instead of stacking another
    return tf.transpose(expr, axes=perm)


def nhwc(value: Value) -> Expr:
    return _transposed(value.expr, TO_NHWC) if value.channels_first else value.expr


def nchw(value: Value) -> Expr:
    return value.expr if value.channels_first else _transposed(value.expr, TO_NCHW)


class Operator:
    """One TFLite operator with its inputs converted, as converters see it."""

    def __init__(self, info: OperatorInfo, tensors: Sequence[TensorInfo], values: Sequence[Value | None]) -> None:
        self.info = info
        self._tensors = tensors
        self._values = list(values)

    @property
    def options(self) -> Any:  # the tflite.<Op>Options table: generated bindings, untyped
        if self.info.options is None:
            raise self.error("the operator has no options table")
        return self.info.options

    def describe(self) -> str:
        out = self.info.outputs[0] if self.info.outputs else -1
        name = f" -> {self._tensors[out].name!r}" if out >= 0 else ""
        return f"{self.info.describe()}{name}"

    def error(self, message: str) -> ConversionError:
        return ConversionError(f"{self.describe()}: {message}")

    @property
    def num_inputs(self) -> int:
        return len(self.info.inputs)

    def has_input(self, k: int) -> bool:
        return k < len(self.info.inputs) and self.info.inputs[k] >= 0

    def tensor(self, k: int) -> TensorInfo:
        if not self.has_input(k):
            raise self.error(f"missing required input #{k}")
        return self._tensors[self.info.inputs[k]]

    def output(self, k: int = 0) -> TensorInfo:
        return self._tensors[self.info.outputs[k]]

    def value(self, k: int) -> Value:
        v = self._values[k] if k < len(self._values) else None
        if v is None:
            raise self.error(f"missing required input #{k}")
        return v

    def replace_input(self, k: int, value: Value) -> None:
        """Hold input k differently (a constant re-laid out by the converter); its tensor is unchanged."""
        self._values[k] = value

    def constant(self, k: int, what: str) -> np.ndarray:
        t = self.tensor(k)
        if t.data is not None:
            return t.data
        expr = self.value(k).expr
        if isinstance(expr, Constant):
            return np.asarray(expr.data)
        raise self.error(f"{what} ({t.describe()}) must be a constant")

    # -- quantisation ---------------------------------------------------------------
    def quantization(self, t: TensorInfo) -> Quantization | None:
        return t.quantization if t.dtype in ("int8", "uint8", "int16", "int32") else None

    def dequantized(self, k: int, channels_first: bool | None = None) -> Value:
        """Input k as float: dequantised if it is a quantised integer tensor (layout as held, or as asked)."""
        v = self.value(k)
        if channels_first is not None and channels_first != v.channels_first:
            v = Value(nchw(v) if channels_first else nhwc(v), channels_first)
        q = self.quantization(self.tensor(k))
        if q is None:
            return v
        t = self.tensor(k)
        if t.dtype not in ("int8", "int32"):
            raise self.error(f"{t.describe()} is {t.dtype}; tessera dequantises int8 and int32")
        axis = q.axis
        if v.channels_first and len(t.shape) == 4:
            axis = NHWC_AXIS_IN_NCHW[axis]
        return Value(dequantize(v.expr, q, t.dtype, axis), v.channels_first)

    def quantized(self, y: Value, k: int = 0) -> Value:
        """The float result `y` quantised as output k is (unchanged for a float output)."""
        out = self.output(k)
        q = self.quantization(out)
        if q is None:
            if out.dtype != "float32":
                raise self.error(f"{out.describe()} is {out.dtype} without quantisation parameters")
            return y
        if out.dtype != "int8" or not q.per_tensor:
            raise self.error(f"{out.describe()}: tessera quantises activations to per-tensor int8, "
                             f"got {out.dtype} with {q.scale.size} scales")
        return Value(quantize(y.expr, q), y.channels_first)

    def same_quantization(self, k: int, out: int = 0) -> bool:
        """Input k and output `out` are the same quantised integer type with equal parameters."""
        a, b = self.tensor(k), self.output(out)
        qa, qb = self.quantization(a), self.quantization(b)
        return a.dtype == b.dtype and qa is not None and qb is not None and qa.per_tensor and qb.per_tensor \
            and float(qa.scale[0]) == float(qb.scale[0]) and int(qa.zero_point[0]) == int(qb.zero_point[0])


def dequantize(x: Expr, q: Quantization, dtype: str, axis: int) -> Expr:
    zp = q.zero_point.astype(dtype)
    return qnn.dequantize(x, Constant(q.scale.astype(np.float32)), Constant(zp), axis=axis)


def quantize(y: Expr, q: Quantization) -> Expr:
    return qnn.quantize(y, Constant(q.scale.astype(np.float32)), Constant(q.zero_point.astype(np.int8)), axis=1,
                        out_dtype="int8", rounding=Rounding.TFLITE)


class GraphImporter:
    def __init__(self, graph: TFLiteGraph) -> None:
        self.graph = graph
        self.values: dict[int, Value] = {}

    def run(self) -> tuple[IRModule, dict[str, np.ndarray]]:
        g = self.graph
        input_vars = []
        for k in g.inputs:
            t = g.tensors[k]
            var = Var(t.name, TensorType(t.shape, t.dtype))
            input_vars.append(var)
            self.values[k] = Value(var)
        for info in g.operators:
            self._convert(info)
        outputs = []
        for k in g.outputs:
            if k not in self.values:
                raise ConversionError(f"graph output {g.tensors[k].describe()} is not produced by any operator")
            outputs.append(nhwc(self.values[k]))
        body = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
        attrs = FuncAttrs(extra={"output_names": tuple(g.tensors[k].name for k in g.outputs)})
        func = infer_function(Function(tuple(input_vars), body, attrs=attrs))
        return IRModule.from_expr(func), {}

    def _input_value(self, k: int, info: OperatorInfo) -> Value | None:
        if k < 0:
            return None
        if k in self.values:
            return self.values[k]
        t = self.graph.tensors[k]
        if t.data is None:
            raise ConversionError(f"{info.describe()} reads {t.describe()}, which no earlier operator, input "
                                  "or buffer defines (are the operators in execution order?)")
        return Value(Constant(t.data))

    def _convert(self, info: OperatorInfo) -> None:
        fn = CONVERTERS.lookup(info.op_name, info.describe())
        inputs = [self._input_value(k, info) for k in info.inputs]
        op = Operator(info, self.graph.tensors, inputs)
        try:
            result = fn(op)
            results = result if isinstance(result, list) else [result]
            folding = all(v is None or isinstance(v.expr, Constant) for v in inputs)
            results = [self._finish(v, folding) for v in results]
        except TesseraError as err:
            text = str(err)
            if info.describe() in text:
                raise
            raise type(err)(f"{op.describe()}: {text}") from None
        except Exception as err:  # a converter bug must still name the operator
            raise ConversionError(f"{op.describe()}: conversion failed ({type(err).__name__}: {err})") from err
        if len(results) != len(info.outputs):
            raise op.error(f"converter produced {len(results)} outputs, the operator declares {len(info.outputs)}")
        for k, value in zip(info.outputs, results):
            expected = self.graph.tensors[k]
            got = shape_of(nhwc(value))
            if got != expected.shape:
                raise op.error(f"output {expected.describe()} has shape {got}, the model declares {expected.shape}")
            self.values[k] = value

    @staticmethod
    def _finish(value: Value, folding: bool) -> Value:
        expr = _typed(value.expr)
        if folding:
            expr = _typed(fold_expr(expr))
        return Value(expr, value.channels_first)


def from_tflite(model: str | Path | bytes) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Import a TFLite model (a path to a .tflite file, or its bytes).

    Returns `(mod, params)` like `from_onnx`; weights are constants of the
    module, so `params` is empty. `mod["main"]` takes and returns TFLite's
    tensors as they are (NHWC, int8 for a full-integer model).
    """
    from . import ops  # noqa: F401  (registers converters)

    graph = read_graph(bytes(model), "the TFLite model") if isinstance(model, (bytes, bytearray)) else read_file(model)
    return GraphImporter(graph).run()
