"""ONNX GraphProto -> Relay IRModule.

The importer walks the nodes in order, hands each one (with its inputs
already converted and typed) to the converter registered for its op type
and opset, and records the outputs by name. Every failure names the node,
its op type and what was expected.

Shapes are static. Sub-graphs whose inputs are all constants (shape
arithmetic of exported models) are folded as they are imported, so a
converter that needs a value at compile time (a Reshape's target shape)
usually finds a constant. Graph inputs that must be constant are reported
by name (`NeedsConstantError`), so a caller can bind them and retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ... import dtype as dt
from ...errors import ConversionError, TesseraError
from ...relay.expr import Constant, Expr, FuncAttrs, Function, Tuple, TupleGetItem, Var
from ...relay.module import IRModule
from ...relay.ty import TensorType
from ...relay.visitor import free_vars, substitute
from ...transform.fold_constant import fold_expr
from ...transform.infer_type import infer_expr, infer_function
from ...runtime.output_stage import DYNAMIC_TAIL_ATTR, DynamicTail, OutputStage
from .dynamic_tail import (DATA_DEPENDENT_SHAPE_OPS, TAIL_SYMBOL, build_tail_model, data_dependent_shape_error,
                           find_tail, tail_boundary)
from . import half
from .registry import CONVERTERS, DEFAULT_DOMAIN, Converter
from .validate import check_constant_operands, check_opsets, check_unique_names

ONNX_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.BOOL: "bool",
}

_REQUIRED = object()


def onnx_dtype(elem_type: int, where: str) -> str:
    if elem_type not in ONNX_DTYPES:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else str(elem_type)
        raise ConversionError(
            f"{where}: element type {name} is not supported; supported: "
            f"{', '.join(onnx.TensorProto.DataType.Name(k) for k in ONNX_DTYPES)}"
        )
    return ONNX_DTYPES[elem_type]


class NeedsConstantError(ConversionError):
    """A value that must be known at compile time depends on graph inputs."""

    def __init__(self, message: str, input_names: Sequence[str]) -> None:
        super().__init__(message)
        self.input_names = list(input_names)


@dataclass
class Node:
    """One ONNX node with its inputs converted, as converters see it."""

    name: str
    op_type: str
    domain: str
    opset: int
    inputs: list[Expr | None]
    input_names: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    # per input: its float16/bfloat16 type in the model when it is computed in float32 (half.py), else None
    stored: list[str | None] = field(default_factory=list)

    def stored_dtype(self, k: int) -> str | None:
        return self.stored[k] if k < len(self.stored) else None

    def describe(self) -> str:
        return f"node {self.name!r} ({self.op_type}, opset {self.opset})"

    def error(self, message: str) -> ConversionError:
        return ConversionError(f"{self.describe()}: {message}")

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if default is _REQUIRED:
            raise self.error(f"missing required attribute {name!r}")
        return default

    def input(self, k: int) -> Expr:
        value = self.inputs[k] if k < len(self.inputs) else None
        if value is None:
            raise self.error(f"missing required input #{k}")
        return value

    def optional_input(self, k: int) -> Expr | None:
        return self.inputs[k] if k < len(self.inputs) else None

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def reject_attrs(self, **unsupported: Any) -> None:
        """Fail on attributes whose value tessera does not implement."""
        for name, supported in unsupported.items():
            if name in self.attrs and self.attrs[name] != supported:
                raise self.error(f"attribute {name}={self.attrs[name]!r} is not supported (only {supported!r})")


class ImportContext:
    """What converters may ask of the importer: types and constant values."""

    def __init__(self, params: dict[str, np.ndarray], graph_inputs: set[str]) -> None:
        self.params = params
        self.graph_inputs = graph_inputs

    def typed(self, expr: Expr) -> Expr:
        return infer_expr(expr, incremental=True)

    def type_of(self, expr: Expr) -> TensorType:
        ty = self.typed(expr).checked_type
        if not isinstance(ty, TensorType):
            raise ConversionError(f"expected a tensor, got {ty}")
        return ty

    def shape_of(self, expr: Expr) -> tuple[int, ...]:
        return self.type_of(expr).shape

    def dtype_of(self, expr: Expr) -> str:
        return self.type_of(expr).dtype

    def constant(self, expr: Expr, what: str) -> np.ndarray:
        """The compile-time value of `expr`, folding through params."""
        if isinstance(expr, Constant):
            return np.asarray(expr.data)
        if isinstance(expr, Var) and expr.name_hint in self.params:
            return np.asarray(self.params[expr.name_hint])
        free = free_vars(expr)
        unknown = [v.name_hint for v in free if v.name_hint not in self.params]
        if unknown:
            raise NeedsConstantError(
                f"{what} must be known at compile time, but depends on graph input(s) {unknown}", unknown
            )
        bound = substitute(expr, {id(v): Constant(self.params[v.name_hint]) for v in free})
        folded = fold_expr(infer_expr(bound), keep_narrow_weights=False)  # the value is what is asked for
        if not isinstance(folded, Constant):
            raise ConversionError(f"{what} must be a compile-time constant")
        return np.asarray(folded.data)


def _parse_attr(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for v in value]
    return value


def _value_info_type(vi: onnx.ValueInfoProto, override: Sequence[int] | None) -> TensorType:
    where = f"graph input {vi.name!r}"
    if not vi.type.HasField("tensor_type"):
        raise ConversionError(f"{where}: only tensor inputs are supported")
    tt = vi.type.tensor_type
    dtype = onnx_dtype(tt.elem_type, where)
    if override is not None:
        return TensorType(tuple(int(d) for d in override), dtype)
    if not tt.HasField("shape"):
        raise ConversionError(f"{where} has no shape; pass shape={{{vi.name!r}: (...)}} to from_onnx")
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(d.dim_value)
        else:
            symbol = d.dim_param or "?"
            raise ConversionError(
                f"{where} has a symbolic dimension {symbol!r}; tessera compiles static shapes. "
                f"Pass shape={{{vi.name!r}: (...)}} to from_onnx (or --input-shape on the command line)"
            )
    return TensorType(tuple(dims), dtype)


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    result: dict[str, int] = {}
    for imp in model.opset_import:
        domain = "" if imp.domain in ("", "ai.onnx") else imp.domain
        result[domain] = imp.version
    result.setdefault(DEFAULT_DOMAIN, 1)
    return result


def check_names(graph: onnx.GraphProto) -> None:
    """Refuse the names onnx.checker and onnxruntime refuse: not UTF-8, or empty where a name is required.

    Every other name is kept exactly (the graph executor and metadata.json use
    it); generated C sees only identifiers made from it (codegen/names.py).
    """
    named = [(f"graph input #{k}", vi.name, True) for k, vi in enumerate(graph.input)]
    named += [(f"graph output #{k}", vi.name, True) for k, vi in enumerate(graph.output)]
    named += [(f"initializer #{k}", t.name, True) for k, t in enumerate(graph.initializer)]
    for index, node in enumerate(graph.node):
        where = f"node #{index} ({node.op_type})"
        named.append((where, node.name, False))
        named += [(f"{where} input #{k}", n, False) for k, n in enumerate(node.input)]  # "" = optional, absent
        named += [(f"{where} output #{k}", n, False) for k, n in enumerate(node.output)]
    for where, name, required in named:
        if not isinstance(name, str):  # protobuf hands back bytes when a string field is not UTF-8
            raise ConversionError(f"{where} has a name that is not valid UTF-8 ({name!r}); ONNX names are UTF-8 text")
        if required and not name:
            raise ConversionError(f"{where} has an empty name; ONNX requires graph inputs, outputs and "
                                  "initializers to be named")


class GraphImporter:
    def __init__(self, model: onnx.ModelProto, shape: Mapping[str, Sequence[int]] | None,
                 freeze_params: bool, constant_inputs: Mapping[str, np.ndarray] | None,
                 opaque_unsupported: bool = False) -> None:
        self.model = model
        self.graph = model.graph
        self.shape_overrides = dict(shape or {})
        self.freeze_params = freeze_params
        self.constant_inputs = dict(constant_inputs or {})
        self.opsets = _opsets(model)
        self.env: dict[str, Expr] = {}
        self.params: dict[str, np.ndarray] = {}
        self.param_vars: list[Var] = []
        self.input_vars: list[Var] = []
        self.opaque_unsupported = opaque_unsupported
        self._inferred: dict[str, TensorType] | None = None
        self.storage: dict[str, str] = {}  # value name -> its float16/bfloat16 type, computed in float32 (half.py)

    def run(self) -> tuple[IRModule, dict[str, np.ndarray]]:
        check_opsets(self.opsets)
        check_unique_names(self.graph)
        check_names(self.graph)
        self._read_initializers()
        self._read_inputs()
        ctx = ImportContext(self.params, {v.name_hint for v in self.input_vars})
        self._widen_sources(ctx)
        tail = find_tail(self.graph, self._inferred_types, CONVERTERS.supports) if self.opaque_unsupported else []
        skipped = set(tail)
        for index, proto in enumerate(self.graph.node):
            if index not in skipped:  # the tail runs in onnxruntime after the graph (dynamic_tail.py)
                self._convert(proto, index, ctx)
        extra: dict[str, object] = {}
        names = [o.name for o in self.graph.output]
        if tail:
            names, extra[DYNAMIC_TAIL_ATTR] = self._dynamic_tail(tail, ctx)
        outputs = []
        for name in names:
            if name not in self.env:
                raise ConversionError(f"graph output {name!r} is not produced by any node")
            outputs.append(self._as_stored(name))
        if not outputs:
            raise ConversionError("the graph has no outputs")
        body = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
        used = {id(v) for v in free_vars(body)}
        params = [v for v in self.param_vars if id(v) in used]
        attrs = FuncAttrs(extra={"output_names": tuple(names), **extra})
        func = Function(tuple(self.input_vars + params), body, attrs=attrs)
        func = infer_function(func)
        param_values = {v.name_hint: self.params[v.name_hint] for v in params}
        return IRModule.from_expr(func), param_values

    def _read_initializers(self) -> None:
        for init in self.graph.initializer:
            try:
                value = numpy_helper.to_array(init)
            except Exception as err:  # malformed tensor data
                raise ConversionError(f"initializer {init.name!r} cannot be read: {err}") from None
            onnx_dtype(init.data_type, f"initializer {init.name!r}")
            value = np.asarray(value, order="C")  # keeps 0-d scalars 0-d (ascontiguousarray makes them (1,))
            if self.freeze_params or not dt.is_float(dt.from_numpy(value.dtype)):
                # integer initializers are shapes, indices and axes: keep them constant
                self.env[init.name] = Constant(value)
            else:
                var = Var(init.name, TensorType(value.shape, value.dtype.name))
                self.params[var.name_hint] = value
                self.param_vars.append(var)
                self.env[init.name] = var

    def _widen_sources(self, ctx: ImportContext) -> None:
        """Inputs and initializers of 16-bit float types enter the graph as float32 (half.py)."""
        for name, value in self.env.items():
            stored = ctx.dtype_of(value)
            if dt.is_storage_only(stored):
                self.env[name] = ctx.typed(half.widen(value))
                self.storage[name] = stored

    def _as_stored(self, name: str) -> Expr:
        """Value `name` in its type in the model (narrowed back to 16 bits where it was widened)."""
        value = self.env[name]
        return half.narrow(value, self.storage[name]) if name in self.storage else value

    def _read_inputs(self) -> None:
        fixed: list[str] = []  # listed as inputs, but their values are in the model
        for vi in self.graph.input:
            if vi.name in self.env:
                fixed.append(vi.name)  # an initializer listed as input (older exporters)
                continue
            if vi.name in self.constant_inputs:
                fixed.append(vi.name)
                self.env[vi.name] = Constant(np.asarray(self.constant_inputs[vi.name]))
                continue
            ty = _value_info_type(vi, self.shape_overrides.get(vi.name))
            var = Var(vi.name, ty)
            self.input_vars.append(var)
            self.env[vi.name] = var
        runtime = [vi.name for vi in self.graph.input if vi.name not in fixed]
        unknown = set(self.shape_overrides) - set(runtime)
        if unknown:
            held = sorted(unknown & set(fixed))
            why = f" ({', '.join(held)}: values stored in the model, their shapes are fixed)" if held else ""
            raise ConversionError(f"shape given for unknown input(s) {sorted(unknown)}{why}; inputs: {runtime}")

    def _convert(self, proto: onnx.NodeProto, index: int, ctx: ImportContext) -> None:
        name = proto.name or f"{proto.op_type}_{index}"
        domain = "" if proto.domain in ("", "ai.onnx") else proto.domain
        opset = self.opsets.get(domain)
        if opset is None:
            raise ConversionError(f"node {name!r} uses domain {proto.domain!r}, which the model does not import")
        inputs: list[Expr | None] = []
        for inp in proto.input:
            if inp == "":
                inputs.append(None)
            elif inp not in self.env:
                raise ConversionError(
                    f"node {name!r} ({proto.op_type}) reads {inp!r}, which no earlier node, input or "
                    "initializer defines (is the graph topologically sorted?)"
                )
            else:
                inputs.append(self.env[inp])
        node = Node(name, proto.op_type, domain, opset, inputs, list(proto.input), list(proto.output),
                    {a.name: _parse_attr(a) for a in proto.attribute}, [self.storage.get(i) for i in proto.input])
        if self.opaque_unsupported and not CONVERTERS.supports(proto.op_type, domain):
            fn = self._opaque_converter(proto)
        elif proto.op_type in DATA_DEPENDENT_SHAPE_OPS and not CONVERTERS.supports(proto.op_type, domain):
            raise data_dependent_shape_error(name, proto.op_type)
        else:
            fn = CONVERTERS.lookup(proto.op_type, opset, domain, name)
        try:
            result = fn(node, ctx)
            results = list(result) if isinstance(result, (list, tuple)) else [result]
            all_const = all(isinstance(i, Constant) for i in inputs if i is not None)
            known = {id(i) for i in inputs if i is not None}  # checked when their nodes were converted
            settled = [self._settle(self._finish(r, all_const, known), node, k, ctx) for k, r in enumerate(results)]
        except NeedsConstantError as err:
            raise NeedsConstantError(f"{node.describe()}: {err}", err.input_names) from None
        except TesseraError as err:
            text = str(err)
            if name in text:
                raise
            raise type(err)(f"{node.describe()}: {text}") from None
        except Exception as err:  # a converter bug must still name the node
            raise ConversionError(
                f"{node.describe()}: conversion failed ({type(err).__name__}: {err})"
            ) from err
        outputs = [o for o in proto.output]
        if len(settled) < len([o for o in outputs if o]):
            raise ConversionError(f"{node.describe()}: converter produced {len(settled)} outputs, "
                                  f"the node declares {len(outputs)}")
        for out_name, (value, stored) in zip(outputs, settled):  # (stored: its 16-bit type, see half.py)
            if out_name:
                self.env[out_name] = value
                if stored is not None:
                    self.storage[out_name] = stored

    def _dynamic_tail(self, tail: list[int], ctx: ImportContext) -> tuple[list[str], DynamicTail]:
        """The compiled graph's outputs (static model outputs, then what the tail reads) and the tail."""
        from ...contrib.onnxruntime import OrtModule

        boundary = tail_boundary(self.graph, tail)
        missing = [name for name in boundary if name not in self.env]
        if missing:
            raise ConversionError(f"the nodes of data-dependent shape read {missing}, which no earlier node, "
                                  "input or initializer defines")
        constants = {n: np.asarray(e.data) for n in boundary if isinstance(e := self.env[n], Constant)}
        fed = {n: ctx.type_of(self._as_stored(n)) for n in boundary if n not in constants}
        model = build_tail_model(self.model, tail, fed, constants)
        static = [o.name for o in self.graph.output if o.name not in model.outputs]
        names = static + [n for n in model.inputs if n not in static]  # a value both output and read, once
        if not names:
            raise ConversionError("every graph output depends on operators of data-dependent shape: nothing is "
                                  "left for tessera to compile; run the model in onnxruntime itself")
        finals = tuple(("stage", model.outputs.index(o.name)) if o.name in model.outputs
                       else ("graph", static.index(o.name)) for o in self.graph.output)
        stage = OutputStage(TAIL_SYMBOL, tuple(names.index(n) for n in model.inputs), finals)
        return names, DynamicTail(OrtModule({TAIL_SYMBOL: model.model.SerializeToString()}), stage)

    def _inferred_types(self) -> dict[str, TensorType]:
        """Static types of every tensor, by ONNX shape inference (for opaque nodes)."""
        if self._inferred is None:
            model = onnx.ModelProto()
            model.CopyFrom(self.model)
            input_vars = {v.name_hint: v for v in self.input_vars}
            for vi in model.graph.input:
                value = input_vars.get(vi.name)
                ty = value.type_annotation if value is not None else None
                if isinstance(ty, TensorType):  # inputs are annotated tensors
                    dims = vi.type.tensor_type.shape.dim
                    del dims[:]
                    for d in ty.shape:
                        dims.add().dim_value = d
            try:
                inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
            except Exception as err:
                raise ConversionError(f"ONNX shape inference failed, needed for unsupported nodes: {err}") from None
            self._inferred = {}
            for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
                tt = vi.type.tensor_type
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
                if tt.elem_type in ONNX_DTYPES and tt.HasField("shape") and min(dims, default=0) >= 0:
                    self._inferred[vi.name] = TensorType(tuple(dims), ONNX_DTYPES[tt.elem_type])
        return self._inferred

    def _opaque_converter(self, proto: onnx.NodeProto) -> Converter:
        from ...op.onnx_opaque import opaque

        def convert(node: Node, ctx: ImportContext) -> list[Expr]:
            types = self._inferred_types()
            missing = [o for o in proto.output if o and o not in types]
            if missing:
                raise node.error(f"unsupported by tessera, and ONNX shape inference gives no static type for {missing}")
            out_types = tuple(types[o] for o in proto.output if o)
            opsets = tuple(sorted(self.opsets.items()))
            stored = [i if t is None else half.narrow(i, t) for i, t in zip(node.inputs, node.stored) if i is not None]
            # typed once here, so that all outputs read one call (not one copy per output)
            call = ctx.typed(opaque(*stored, node=proto.SerializeToString(), opsets=opsets, output_types=out_types))
            if len(out_types) == 1:
                return [call]
            return [TupleGetItem(call, k) for k in range(len(out_types))]

        return convert

    @staticmethod
    def _settle(expr: Expr, node: Node, output: int, ctx: ImportContext) -> tuple[Expr, str | None]:
        """Result `output` as later nodes see it (float32 for 16-bit float types, see half.py) and its stored type."""
        if not isinstance(expr.checked_type, TensorType):
            return expr, None
        storage = [t for t in node.stored if t is not None]
        value, stored = half.settle(expr, expr.checked_type.dtype, node.op_type, output, storage)
        return (expr if value is expr else ctx.typed(value)), stored

    @staticmethod
    def _finish(expr: Expr, all_const: bool, known: set[int]) -> Expr:
        expr = infer_expr(expr, incremental=True)
        check_constant_operands(expr, known)  # what folding (or the kernel) would refuse, named now
        if all_const:
            expr = fold_expr(expr)
            expr = infer_expr(expr, incremental=True)
        return expr


def from_onnx(
    model: onnx.ModelProto | str,
    shape: Mapping[str, Sequence[int]] | None = None,
    freeze_params: bool = False,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
    opaque_unsupported: bool = False,
) -> tuple[IRModule, dict[str, np.ndarray]]:
    """Import an ONNX model.

    Returns `(mod, params)`: `mod["main"]` takes the graph inputs followed
    by the float weights, whose values are in `params` (pass them to
    `tessera.build`). `shape` fixes input shapes (needed for symbolic
    dimensions); `constant_inputs` turns graph inputs into constants.
    With `opaque_unsupported`, operators tessera lacks are kept as opaque
    ONNX nodes for an accelerator that runs them (target "onnxruntime").
    """
    from . import ops  # noqa: F401  (registers converters)

    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        try:
            model = onnx.load(model)
        except Exception as err:
            raise ConversionError(f"cannot read ONNX model {model!r}: {err}") from None
    if not isinstance(model, onnx.ModelProto):
        raise ConversionError(f"from_onnx expects an onnx.ModelProto or a path, got {type(model).__name__}")
    return GraphImporter(model, shape, freeze_params, constant_inputs, opaque_unsupported).run()
