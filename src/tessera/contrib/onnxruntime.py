"""`onnxruntime`: partitions run by onnxruntime — a fallback for operators
tessera does not implement.

The whole integration is this module: a target kind whose RelayToRuntime
hook serialises each partition to an ONNX model and returns an external
module that runs it with onnxruntime when the graph calls it, and whose
UpdateConstants hook hands the partition's constants to the pipeline, so
they are exported once, next to the module. `target="onnxruntime"` is the
host `c` target plus this accelerator; import the model with
`from_onnx(..., opaque_unsupported=True)` so unsupported nodes survive.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import CompileError
from ..op.onnx_opaque import OnnxNodeAttrs, opaque
from ..relay.expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from ..relay.ty import flatten_tensor_types
from ..relay.visitor import post_order
from ..runtime.external import ExternalFunction, ExternalModule, register_external_module
from ..target.hooks import RELAY_TO_RUNTIME, UPDATE_CONSTANTS
from ..target.kind import TargetKind
from ..target.tags import register_tag

KIND = "onnxruntime"


def _constants(func: Function, symbol: str) -> list[tuple[str, Constant]]:
    """The partition's constants with the names both hooks agree on."""
    found = [n for n in post_order(func.body, into_functions=False) if isinstance(n, Constant)]
    return [(f"{symbol}.c{k}", c) for k, c in enumerate(found)]


def _to_onnx(func: Function, symbol: str) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """The partition as an ONNX graph (initializers named but left out)."""
    names: dict[int, list[str]] = {}
    inputs = []
    for k, p in enumerate(func.params):
        names[id(p)] = [f"in{k}"]
        inputs.append(helper.make_tensor_value_info(f"in{k}", helper.np_dtype_to_tensor_dtype(
            np.dtype(p.tensor_type.dtype)), p.tensor_type.shape))
    for name, c in _constants(func, symbol):
        names[id(c)] = [name]
    nodes: list[onnx.NodeProto] = []
    opsets: dict[str, int] = {}
    for node in post_order(func.body, into_functions=False):
        if id(node) in names or isinstance(node, Var):
            continue
        if isinstance(node, Call) and node.op is opaque:
            attrs = node.attrs_as(OnnxNodeAttrs)
            proto = onnx.NodeProto()
            proto.ParseFromString(attrs.node)
            args = iter(names[id(a)][0] for a in node.args)
            new_inputs = [next(args) if name else "" for name in proto.input]
            outs = [f"t{len(nodes)}_{k}" if o else "" for k, o in enumerate(proto.output)]
            del proto.input[:], proto.output[:]
            proto.input.extend(new_inputs)
            proto.output.extend(outs)
            proto.name = f"{symbol}_n{len(nodes)}"
            nodes.append(proto)
            names[id(node)] = [o for o in outs if o]
            opsets.update(dict(attrs.opsets))
        elif isinstance(node, TupleGetItem):
            names[id(node)] = [names[id(node.tuple_value)][node.index]]
        elif isinstance(node, Tuple):
            names[id(node)] = [n for f in node.fields for n in names[id(f)]]
        else:
            kind = getattr(getattr(node, "op", None), "name", type(node).__name__)
            raise CompileError(f"onnxruntime partition {symbol}: cannot express {kind} in ONNX")
    out_names = names[id(func.body)]
    types = flatten_tensor_types(func.body.checked_type)  # the function's return type
    outputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), t.shape)
               for n, t in zip(out_names, types)]
    graph = helper.make_graph(nodes, symbol, inputs, outputs)
    opset_ids = [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    # the lowest IR version these opsets allow: older runtimes reject newer ones
    model = helper.make_model(graph, opset_imports=opset_ids)
    model.ir_version = helper.find_min_ir_version_for(opset_ids, ignore_unknown=True)
    return model, [i.name for i in inputs], out_names


@register_external_module
class OrtModule(ExternalModule):
    """Partitions as ONNX models, run by onnxruntime (one thread each)."""

    type_key = "onnxruntime"

    def __init__(self, models: Mapping[str, bytes]) -> None:
        self.models = dict(models)
        self.constants: dict[str, np.ndarray] = {}
        self._sessions: dict[str, object] = {}

    def function_names(self) -> list[str]:
        return list(self.models)

    def bind_constants(self, constants: Mapping[str, np.ndarray]) -> None:
        self.constants.update(constants)
        self._sessions.clear()

    def _session(self, name: str):
        if name not in self._sessions:
            import onnxruntime as ort

            model = onnx.ModelProto()
            model.ParseFromString(self.models[name])
            used = {i for n in model.graph.node for i in n.input}
            for cname, value in self.constants.items():
                if cname in used:
                    model.graph.initializer.append(onnx.numpy_helper.from_array(value, cname))
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            self._sessions[name] = ort.InferenceSession(model.SerializeToString(), opts,
                                                        providers=["CPUExecutionProvider"])
        return self._sessions[name]

    def get_function(self, name: str) -> ExternalFunction:
        def run(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> None:
            session = self._session(name)
            feeds = {i.name: a for i, a in zip(session.get_inputs(), ins)}
            for out, value in zip(outs, session.run(None, feeds)):
                out[...] = value

        return run

    def run_dynamic(self, name: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        session = self._session(name)
        feeds = {i.name: a for i, a in zip(session.get_inputs(), inputs)}
        return [np.asarray(value) for value in session.run(None, feeds)]

    def save(self) -> bytes:
        return json.dumps({k: v.hex() for k, v in self.models.items()}).encode()

    @classmethod
    def load(cls, data: bytes) -> "OrtModule":
        return cls({k: bytes.fromhex(v) for k, v in json.loads(data).items()})


def relay_to_runtime(func: Function) -> OrtModule:
    symbol = func.attrs.global_symbol
    if symbol is None:  # PartitionGraph names every partition it makes
        raise CompileError("onnxruntime: the partition has no global_symbol to export it under")
    model, _, _ = _to_onnx(func, symbol)
    return OrtModule({symbol: model.SerializeToString()})


def update_constants(func: Function, symbol: str) -> dict[str, np.ndarray]:
    return {name: np.asarray(c.data) for name, c in _constants(func, symbol)}


(
    TargetKind.register(KIND, device="cpu", accelerator=True,
                        doc="onnxruntime runs ONNX nodes tessera does not implement (a fallback)")
    .set_supported_ops({"onnx.opaque": True})
    .set_bind_constants(True)
    .set_attr(RELAY_TO_RUNTIME, relay_to_runtime)
    .set_attr(UPDATE_CONSTANTS, update_constants)
)
register_tag("onnxruntime", {"kind": "c", "accelerators": [{"kind": KIND}]}, doc="host C + onnxruntime fallback")

__all__ = ["OrtModule", "relay_to_runtime", "update_constants"]
