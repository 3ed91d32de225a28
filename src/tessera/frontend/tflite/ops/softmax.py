"""SOFTMAX over the last axis.

An int8 softmax is written out as LiteRT's optimized kernel computes it, so
it matches bit for bit: exponentials of the integer distance to the row's
maximum (``expf(-input_scale * beta * d)``, float32), their float sum, one
reciprocal of ``sum * output_scale``, and each product rounded half away from
zero onto the output's zero point.
"""

from __future__ import annotations

import numpy as np

from ....op import elemwise as ew
from ....op import qnn
from ....op import reduce as red
from ....op.nn import softmax as sm
from ....op.qnn_rounding import Rounding
from ....relay.expr import Constant
from ..importer import Operator, Value, nhwc
from ..registry import converter


@converter("SOFTMAX")
def softmax(op: Operator) -> Value:
    beta = np.float32(op.options.Beta())
    x = nhwc(op.value(0))
    axis = len(op.tensor(0).shape) - 1
    if op.tensor(0).dtype == "float32":
        scaled = x if beta == 1 else ew.multiply(x, Constant(np.asarray(beta)))
        return Value(sm.softmax(scaled, axis=-1))
    q_in, q_out = op.quantization(op.tensor(0)), op.quantization(op.output())
    if op.tensor(0).dtype != "int8" or op.output().dtype != "int8" or q_in is None or q_out is None:
        raise op.error("quantised SOFTMAX is supported for int8 input and output")
    xi = ew.cast(x, dtype="int32")
    distance = ew.subtract(red.max(xi, axes=(axis,), keepdims=True), xi)
    scale = np.float32(-np.float32(q_in.scale[0]) * beta)
    e = ew.exp(ew.multiply(ew.cast(distance, dtype="float32"), Constant(np.asarray(scale))))
    total = red.sum(e, axes=(axis,), keepdims=True)
    inverse = ew.divide(Constant(np.asarray(1, np.float32)), ew.multiply(total, Constant(np.asarray(q_out.scale[0], np.float32))))
    y = qnn.quantize(ew.multiply(e, inverse), Constant(np.ones(1, np.float32)),
                     Constant(q_out.zero_point.astype(np.int8)), axis=1, out_dtype="int8",
                     rounding=Rounding.TFLITE)
    return Value(y)
