"""The partitioned graph as an ONNX file, for Netron and other ONNX viewers.

    onnx.save(report_onnx(partition_report(lib)), "placement.onnx")

One ONNX node per box of the report's picture: a host kernel (op type: its
operators joined by "+", domain `tessera.<target or piece>`) or a call
inside an accelerator partition (op type: the composite, domain
`tessera.<accelerator>`). Each node carries its target, its kernel or
partition, its operators and the shapes of the constants it reads as
attributes (which Netron shows) and as metadata_props. The file holds no
weights and computes nothing: it is a picture, not a model.
"""

from __future__ import annotations

import onnx
from onnx import helper

from ..relay.ty import TensorType
from .report import PartitionReport

PRODUCER = "tessera --report"
ONNX_DTYPES = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
               "float64": onnx.TensorProto.DOUBLE, "int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8,
               "int16": onnx.TensorProto.INT16, "int32": onnx.TensorProto.INT32, "int64": onnx.TensorProto.INT64,
               "bool": onnx.TensorProto.BOOL}


def _value_info(name: str, ty: object) -> onnx.ValueInfoProto:
    if isinstance(ty, TensorType):
        return helper.make_tensor_value_info(name, ONNX_DTYPES.get(ty.dtype, onnx.TensorProto.UNDEFINED), ty.shape)
    return helper.make_empty_tensor_value_info(name)


def _node(op_type: str, target: str, kernel: str, ops: list[str], constants: list[str], inputs: list[str],
          output: str) -> onnx.NodeProto:
    node = helper.make_node(op_type, inputs, [output], name=output, domain=f"tessera.{target}",
                            target=target, kernel=kernel, ops=ops or [op_type], constants=constants or ["none"])
    for key, value in (("target", target), ("kernel", kernel)):
        entry = node.metadata_props.add()
        entry.key, entry.value = key, value
    return node


def report_onnx(report: PartitionReport) -> onnx.ModelProto:
    """The report's graph as an ONNX model whose every node names the target that runs it."""
    inputs: dict[str, list[str]] = {}  # node id -> the tensors it reads
    for e in report.edges:
        inputs.setdefault(e.dst, []).append(e.src)
    names = {t.node_id: t.name for t in report.terminals if t.name}  # model inputs keep their names
    nodes: list[onnx.NodeProto] = []
    for k in report.kernels:
        if not k.partition:
            op_type = "+".join(dict.fromkeys(k.ops)) or k.name
            nodes.append(_node(op_type, k.target, k.name, k.ops, k.constants,
                               [names.get(s, s) for s in inputs.get(k.node_id, [])], k.node_id))
        for m in k.members:
            nodes.append(_node(m.name, k.target, k.name, m.ops, m.constants,
                               [names.get(s, s) for s in inputs.get(m.node_id, [])], m.node_id))
    types = {e.src: e.ty for e in report.edges}
    graph = helper.make_graph(
        nodes, "partitioned",
        [_value_info(names[t.node_id], types.get(t.node_id)) for t in report.terminals if t.node_id in names],
        [_value_info(names.get(s, s), types.get(s)) for s in inputs.get("out", [])],
        value_info=[_value_info(s, ty) for s, ty in types.items() if s not in names],
    )
    domains = sorted({n.domain for n in nodes})
    model = helper.make_model(graph, producer_name=PRODUCER,
                              opset_imports=[helper.make_opsetid("", 21), *(helper.make_opsetid(d, 1) for d in domains)])
    return model
