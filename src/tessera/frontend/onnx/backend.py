"""tessera as an ONNX backend (`onnx.backend.base.Backend`).

    from tessera.frontend.onnx.backend import TesseraBackend
    rep = TesseraBackend.prepare(model)
    outputs = rep.run([x])

Compilation happens at the first `run`, when the input shapes are known.
Graph inputs that must be compile-time constants (e.g. a Reshape's shape fed
as an input) are bound to the values of that run; a later run with other
values compiles again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ...errors import ConversionError
from .importer import NeedsConstantError, from_onnx


def graph_input_names(model: onnx.ModelProto) -> list[str]:
    inits = {i.name for i in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


class TesseraRep(BackendRep):
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.input_names = graph_input_names(model)
        self._compiled: dict[tuple, tuple[Any, list[str]]] = {}
        self._constant_names: set[str] = set()

    def _key(self, feeds: dict[str, np.ndarray]) -> tuple:
        parts = []
        for name in self.input_names:
            a = feeds[name]
            value = a.tobytes() if name in self._constant_names else b""
            parts.append((name, a.shape, a.dtype.str, value))
        return tuple(parts)

    def _compile(self, feeds: dict[str, np.ndarray]) -> tuple[Any, list[str]]:
        from ...backend.build_module import build

        for _ in range(len(self.input_names) + 1):
            constants = {n: feeds[n] for n in self._constant_names}
            shapes = {n: feeds[n].shape for n in self.input_names if n not in constants}
            try:
                mod, params = from_onnx(self.model, shape=shapes, constant_inputs=constants)
            except NeedsConstantError as err:
                new = set(err.input_names) - self._constant_names
                if not new or not new <= set(self.input_names):
                    raise
                self._constant_names |= new
                continue
            lib = build(mod, params=params)
            runtime_inputs = [n for n in self.input_names if n not in self._constant_names]
            return lib, runtime_inputs
        raise ConversionError("could not determine which inputs must be constant")

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            if len(values) != len(self.input_names):
                raise ConversionError(f"model takes {len(self.input_names)} inputs, got {len(values)}")
            feeds = {n: np.asarray(v) for n, v in zip(self.input_names, values)}
        entry = self._compiled.get(self._key(feeds))
        if entry is None:
            entry = self._compile(feeds)
            # compiling may have found inputs that must be constant: key on them too
            self._compiled[self._key(feeds)] = entry
        lib, runtime_inputs = entry
        return tuple(lib(*[feeds[n] for n in runtime_inputs]))


class TesseraBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> TesseraRep:
        if not cls.supports_device(device):
            raise ConversionError(f"tessera runs on CPU only, got device {device!r}")
        return TesseraRep(model)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = TesseraBackend.prepare
run_model = TesseraBackend.run_model
supports_device = TesseraBackend.supports_device


def claimed_op_types() -> set[str]:
    from . import ops  # noqa: F401
    from .registry import CONVERTERS

    return set(CONVERTERS.op_types())


def graph_op_types(graph: onnx.GraphProto) -> set[str]:
    ops = set()
    for node in graph.node:
        ops.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}")
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= graph_op_types(attr.g)
            for g in attr.graphs:
                ops |= graph_op_types(g)
    return ops


__all__: Sequence[str] = ["TesseraBackend", "TesseraRep", "prepare", "run_model", "supports_device"]
