"""The tail of an ONNX graph whose shapes depend on the data, split off for onnxruntime.

tessera compiles static shapes. `NonZero` (and `Unique`, `NonMaxSuppression`,
`Compress`) return as many elements as the data makes, so neither they nor
anything computed from their results has a shape known at compile time.
When unsupported nodes may run in onnxruntime (`from_onnx(...,
opaque_unsupported=True)`, the CLI's `-t onnxruntime`), such a node and every
node reading its results, directly or not, form the *tail*:

* the rest of the graph is imported as usual and returns the model's
  static outputs plus every value the tail reads (constants excepted: they
  travel inside the tail model as initializers);
* the tail becomes an ONNX model run by onnxruntime after the compiled
  graph (an output stage, `runtime/output_stage.py`), which puts the
  model's outputs back in their order.

Without the fallback, these operators are refused with an error naming the
node and the option that runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import ConversionError
from ...relay.ty import TensorType

# operators whose output shape depends on input values (when tessera has no converter for them)
DATA_DEPENDENT_SHAPE_OPS = frozenset({"NonZero", "Unique", "NonMaxSuppression", "Compress"})

TAIL_SYMBOL = "onnx_dynamic_tail"  # the tail's function in its onnxruntime module


def data_dependent_shape_error(node_name: str, op_type: str) -> ConversionError:
    return ConversionError(
        f"node {node_name!r} ({op_type}): its output shape depends on the input values, and tessera compiles "
        "static shapes. Run it, and the operators after it, in onnxruntime: `tessera compile/run ... "
        "-t onnxruntime`, or from_onnx(..., opaque_unsupported=True) with tessera.build(..., target='onnxruntime')"
    )


def find_tail(graph: onnx.GraphProto, static_types: Callable[[], Mapping[str, TensorType]],
              supports: Callable[[str, str], bool]) -> list[int]:
    """Indices of the tail's nodes: unsupported nodes with an output of no static type, and their readers.

    `static_types` (ONNX shape inference) is called only if some node is unsupported."""
    dynamic: set[str] = set()
    tail = []
    for index, node in enumerate(graph.node):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        reads_dynamic = any(name in dynamic for name in node.input if name)
        unknown_shape = not supports(node.op_type, domain) and any(
            o and o not in static_types() for o in node.output)
        if reads_dynamic or unknown_shape:
            tail.append(index)
            dynamic.update(o for o in node.output if o)
    return tail


@dataclass(frozen=True)
class TailModel:
    model: onnx.ModelProto
    inputs: tuple[str, ...]  # values the compiled graph must return for the tail, in order
    outputs: tuple[str, ...]  # the model's outputs the tail computes, in order


def tail_boundary(graph: onnx.GraphProto, tail: Sequence[int]) -> list[str]:
    """The values tail nodes read that no tail node makes, in order of first use."""
    made = {o for k in tail for o in graph.node[k].output if o}
    seen: dict[str, None] = {}
    for k in tail:
        for name in graph.node[k].input:
            if name and name not in made:
                seen.setdefault(name)
    return list(seen)


def build_tail_model(model: onnx.ModelProto, tail: Sequence[int], inputs: Mapping[str, TensorType],
                     constants: Mapping[str, np.ndarray]) -> TailModel:
    """The tail as a model of its own: `inputs` are fed by the compiled graph, `constants` become initializers."""
    graph = model.graph
    made = {o for k in tail for o in graph.node[k].output if o}
    outputs = [vi for vi in graph.output if vi.name in made]
    value_infos = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(ty.dtype)), ty.shape)
                   for name, ty in inputs.items()]
    out_infos = [helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, None) for vi in outputs]
    initializers = [numpy_helper.from_array(np.asarray(value), name) for name, value in constants.items()]
    tail_graph = helper.make_graph([graph.node[k] for k in tail], f"{graph.name}_tail", value_infos, out_infos,
                                   initializer=initializers)
    result = helper.make_model(tail_graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    result.ir_version = model.ir_version  # what onnxruntime accepted for the whole model
    return TailModel(result, tuple(inputs), tuple(vi.name for vi in outputs))


__all__ = ["DATA_DEPENDENT_SHAPE_OPS", "TAIL_SYMBOL", "TailModel", "build_tail_model",
           "data_dependent_shape_error", "find_tail", "tail_boundary"]
