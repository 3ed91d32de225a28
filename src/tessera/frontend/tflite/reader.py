"""A .tflite flatbuffer read into plain values, checked before conversion.

The flatbuffer is parsed by the `tflite` package's schema bindings; this
module turns its first subgraph into `TFLiteGraph`: tensors (name, shape,
dtype, constant data, quantisation) and operators (builtin name, tensor
indices, options table). Everything a converter could trip over later is
checked here and reported with the tensor or operator it concerns: the file
identifier, truncation, buffers out of range, unknown element types, custom
operators and several subgraphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tflite

from ...errors import ConversionError

FILE_IDENTIFIER = b"TFL3"

# TensorType enum value -> (tessera dtype, NumPy dtype)
DTYPES: dict[int, str] = {
    tflite.TensorType.FLOAT32: "float32",
    tflite.TensorType.INT32: "int32",
    tflite.TensorType.INT64: "int64",
    tflite.TensorType.INT8: "int8",
    tflite.TensorType.UINT8: "uint8",
    tflite.TensorType.INT16: "int16",
    tflite.TensorType.BOOL: "bool",
}
_TYPE_NAMES = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_") and isinstance(v, int)}


@dataclass(frozen=True)
class Quantization:
    """Affine quantisation of a tensor: per tensor (one scale) or along `axis`."""

    scale: np.ndarray  # float32
    zero_point: np.ndarray  # int64
    axis: int

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1


@dataclass(frozen=True)
class TensorInfo:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None  # the constant value, None for activations and graph inputs
    quantization: Quantization | None

    def describe(self) -> str:
        return f"tensor #{self.index} {self.name!r}"


@dataclass(frozen=True)
class OperatorInfo:
    index: int
    op_name: str  # the BuiltinOperator name, e.g. CONV_2D
    version: int
    inputs: tuple[int, ...]  # -1: an optional input left out
    outputs: tuple[int, ...]
    options: Any  # the tflite.<Op>Options table, or None

    def describe(self) -> str:
        return f"operator #{self.index} ({self.op_name})"


@dataclass(frozen=True)
class TFLiteGraph:
    tensors: tuple[TensorInfo, ...]
    operators: tuple[OperatorInfo, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


_OPTION_CLASSES: dict[int, type] = {}


def _options_class(code: int) -> type | None:
    """The tflite.<Name> class of BuiltinOptions enum value `code` (e.g. Conv2DOptions)."""
    if not _OPTION_CLASSES:
        for name, value in vars(tflite.BuiltinOptions).items():
            if isinstance(value, int) and not name.startswith("_") and hasattr(tflite, name):
                _OPTION_CLASSES[value] = getattr(tflite, name)
    return _OPTION_CLASSES.get(code)


def _check_header(data: bytes, where: str) -> None:
    if len(data) < 8:
        raise ConversionError(f"{where}: {len(data)} bytes is too short for a TFLite flatbuffer")
    if data[4:8] != FILE_IDENTIFIER:
        raise ConversionError(f"{where}: not a TFLite model (file identifier {bytes(data[4:8])!r}, "
                              f"expected {FILE_IDENTIFIER!r})")
    root = int.from_bytes(data[:4], "little")
    if root >= len(data):
        raise ConversionError(f"{where}: truncated (the root table is at byte {root} of {len(data)})")


def _quantization(t: Any, info_where: str, ndim: int) -> Quantization | None:
    q = t.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scale = np.asarray(q.ScaleAsNumpy(), np.float32).reshape(-1)
    zp = np.asarray(q.ZeroPointAsNumpy(), np.int64).reshape(-1) if q.ZeroPointLength() else \
        np.zeros(scale.shape, np.int64)
    if zp.size != scale.size:
        raise ConversionError(f"{info_where}: {scale.size} scales but {zp.size} zero points")
    axis = int(q.QuantizedDimension())
    if scale.size > 1 and not 0 <= axis < ndim:
        raise ConversionError(f"{info_where}: quantised along axis {axis} of a {ndim}-d tensor")
    return Quantization(scale, zp, axis)


def _tensor(model: Any, g: Any, index: int) -> TensorInfo:
    t = g.Tensors(index)
    name = (t.Name() or b"").decode("utf-8", errors="replace") or f"tensor_{index}"
    where = f"tensor #{index} {name!r}"
    type_code = int(t.Type())
    if type_code not in DTYPES:
        raise ConversionError(f"{where}: element type {_TYPE_NAMES.get(type_code, type_code)} is not supported; "
                              f"supported: {', '.join(_TYPE_NAMES[k] for k in DTYPES)}")
    dtype = DTYPES[type_code]
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    if any(d < 0 for d in shape):
        raise ConversionError(f"{where}: dynamic shape {list(shape)}; tessera compiles static shapes")
    data = None
    buffer_index = int(t.Buffer())
    if buffer_index >= model.BuffersLength():
        raise ConversionError(f"{where}: buffer {buffer_index} does not exist (the model has "
                              f"{model.BuffersLength()})")
    if buffer_index > 0:
        buf = model.Buffers(buffer_index)
        if buf.Offset() > 1:
            raise ConversionError(f"{where}: data stored outside the flatbuffer (models over 2 GB) is not supported")
        if buf.DataLength():
            raw = buf.DataAsNumpy().tobytes()
            expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if len(raw) != expected:
                raise ConversionError(f"{where}: {len(raw)} bytes of data for shape {list(shape)} {dtype} "
                                      f"({expected} expected)")
            data = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return TensorInfo(index, name, shape, dtype, data, _quantization(t, where, len(shape)))


def _operator(model: Any, g: Any, index: int, tensor_count: int) -> OperatorInfo:
    op = g.Operators(index)
    code_index = int(op.OpcodeIndex())
    if code_index >= model.OperatorCodesLength():
        raise ConversionError(f"operator #{index}: operator code {code_index} does not exist")
    oc = model.OperatorCodes(code_index)
    code = max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))  # old files fill only the deprecated field
    if code == tflite.BuiltinOperator.CUSTOM:
        custom = (oc.CustomCode() or b"?").decode("utf-8", errors="replace")
        raise ConversionError(f"operator #{index}: custom operator {custom!r} is not supported (only builtin "
                              "operators are)")
    try:
        op_name = tflite.opcode2name(code)
    except ValueError:
        raise ConversionError(f"operator #{index}: unknown builtin operator code {code} (newer than the schema "
                              f"of tflite {tflite.__version__})") from None
    inputs = tuple(int(i) for i in op.InputsAsNumpy()) if op.InputsLength() else ()
    outputs = tuple(int(i) for i in op.OutputsAsNumpy()) if op.OutputsLength() else ()
    for k in inputs + outputs:
        if k >= tensor_count or k < -1:
            raise ConversionError(f"operator #{index} ({op_name}): tensor index {k} is out of range "
                                  f"(the graph has {tensor_count})")
    options = None
    cls = _options_class(int(op.BuiltinOptionsType()))
    table = op.BuiltinOptions()
    if cls is not None and table is not None:
        options = cls()
        options.Init(table.Bytes, table.Pos)
    return OperatorInfo(index, op_name, int(oc.Version()), inputs, outputs, options)


def read_graph(data: bytes, where: str) -> TFLiteGraph:
    """The first (main) subgraph of the flatbuffer `data`; `where` names the source in errors."""
    _check_header(data, where)
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        if model.SubgraphsLength() < 1:
            raise ConversionError(f"{where}: the model has no subgraph")
        if model.SubgraphsLength() > 1:
            raise ConversionError(f"{where}: {model.SubgraphsLength()} subgraphs (control flow: WHILE, IF, "
                                  "CALL_ONCE); tessera imports single-subgraph models")
        g = model.Subgraphs(0)
        tensors = tuple(_tensor(model, g, k) for k in range(g.TensorsLength()))
        operators = tuple(_operator(model, g, k, len(tensors)) for k in range(g.OperatorsLength()))
        inputs = tuple(int(i) for i in g.InputsAsNumpy()) if g.InputsLength() else ()
        outputs = tuple(int(i) for i in g.OutputsAsNumpy()) if g.OutputsLength() else ()
    except ConversionError:
        raise
    except Exception as err:  # the bindings read past the end of a truncated or corrupt buffer
        raise ConversionError(f"{where}: truncated or corrupt TFLite flatbuffer ({type(err).__name__}: {err})") \
            from None
    if not outputs:
        raise ConversionError(f"{where}: the graph has no outputs")
    for k in inputs + outputs:
        if not 0 <= k < len(tensors):
            raise ConversionError(f"{where}: graph input/output tensor {k} is out of range")
    return TFLiteGraph(tensors, operators, inputs, outputs)


def read_file(path: str | Path) -> TFLiteGraph:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ConversionError(f"cannot read TFLite model {str(path)!r}: {err.strerror or err}") from None
    return read_graph(data, str(path))
