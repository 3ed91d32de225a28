"""`onnx.opaque`: an ONNX node tessera does not implement, kept as it is.

The importer creates it (with `from_onnx(..., opaque_unsupported=True)`) so
that a target able to run ONNX nodes — the `onnxruntime` accelerator — can
take it; the output types come from ONNX shape inference. No host lowering
exists: a build whose targets cannot run the node fails, naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from ..errors import CompileError
from ..relay.ty import TensorType, TupleType, Type
from .registry import OpPattern, register_op


@dataclass(frozen=True)
class OnnxNodeAttrs:
    node: bytes  # a serialised onnx.NodeProto
    opsets: tuple[tuple[str, int], ...]  # (domain, version) the model imports
    output_types: tuple[TensorType, ...]

    @property
    def op_type(self) -> str:
        import onnx

        proto = onnx.NodeProto()
        proto.ParseFromString(self.node)
        return proto.op_type


def _type(types: tuple[Type, ...], attrs: OnnxNodeAttrs) -> Type:
    outs = attrs.output_types
    return outs[0] if len(outs) == 1 else TupleType(outs)


def _reference(args: list[np.ndarray], attrs: OnnxNodeAttrs):
    """Evaluate with onnx's reference implementation (used for constant folding)."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = onnx.NodeProto()
    node.ParseFromString(attrs.node)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in zip([i for i in node.input if i], args)]
    outputs = [helper.make_tensor_value_info(n, 0, None) for n in node.output if n]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in attrs.opsets])
    results = ReferenceEvaluator(model).run(None, {i.name: a for i, a in zip(inputs, args)})
    assert isinstance(results, list)  # the outputs in order (a dict only with intermediate=True)
    return results[0] if len(results) == 1 else tuple(results)


def _no_lowering(inputs: list, attrs: object, out: object, sched: object) -> NoReturn:
    raise CompileError("onnx.opaque has no lowering to loops; build with an accelerator that runs ONNX nodes "
                       "(e.g. target='onnxruntime')")


opaque = register_op(
    "onnx.opaque", type_rel=_type, reference=_reference, pattern=OpPattern.OPAQUE, compute=_no_lowering,
    attrs=OnnxNodeAttrs, doc="An ONNX node tessera does not implement, kept for an accelerator to run.",
)
