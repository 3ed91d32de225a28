"""A node with several outputs imports as one call that every output reads.

The importer types each output on its own; a multi-output call left untyped
by its converter was copied once per output, so the kernel ran once per
output (the AOT executor called `fused_topk` twice).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from tessera.frontend import from_onnx
from tessera.relay.expr import Call
from tessera.relay.visitor import post_order


def _calls_named(func, name: str) -> set[int]:
    return {id(e) for e in post_order(func) if isinstance(e, Call) and getattr(e.op, "name", "") == name}


def _model(node: onnx.NodeProto, outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])], outputs,
                              initializer=[helper.make_tensor("k", TensorProto.INT64, [1], [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_topk_values_and_indices_read_one_call() -> None:
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)
    model = _model(node, [helper.make_tensor_value_info("values", TensorProto.FLOAT, [2, 3]),
                          helper.make_tensor_value_info("indices", TensorProto.INT64, [2, 3])])
    mod, _ = from_onnx(model)
    assert len(_calls_named(mod["main"], "topk")) == 1
