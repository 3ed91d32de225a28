"""What `tessera.build` returns: graph, parameters and the compiled kernels."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..relay.module import IRModule
from ..runtime.module import CSourceModule, SharedLibrary, build_and_load
from .graph_codegen import GraphPlan


class GraphExecutorLibrary:
    """A compiled model for the graph executor.

    `lib(inputs)` runs it once; `GraphModule(lib)` gives full control;
    `export_library(path)` writes one loadable shared object.
    """

    def __init__(self, graph_json: str, params: Mapping[str, np.ndarray], module: CSourceModule,
                 shared_library: SharedLibrary, ir_mod: IRModule | None = None,
                 python_seconds: float = 0.0, compile_seconds: float = 0.0,
                 input_names: Sequence[str] = ()) -> None:
        self.graph_json = graph_json
        self.params = dict(params)
        self.module = module
        self.shared_library = shared_library
        self.ir_mod = ir_mod
        self.python_seconds = python_seconds
        self.compile_seconds = compile_seconds
        self.input_names = list(input_names)
        self._executor = None

    @classmethod
    def compile(cls, plan: GraphPlan, csrc: CSourceModule, ir_mod: IRModule,
                python_seconds: float) -> "GraphExecutorLibrary":
        t0 = time.perf_counter()
        so = build_and_load(csrc)
        names = [plan.nodes[n].name for n in plan.input_nodes]
        return cls(plan.to_json(), plan.params, csrc, so, ir_mod, python_seconds,
                   time.perf_counter() - t0, names)

    @property
    def c_sources(self) -> dict[str, str]:
        return {s.name: s.text for s in self.module.sources}

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> list[np.ndarray]:
        from ..runtime.graph_executor import GraphModule

        if self._executor is None:
            self._executor = GraphModule(self)
        return self._executor(*args, **kwargs)

    def export_library(self, path: str | Path) -> Path:
        from ..runtime.export import export_shared_library

        return export_shared_library(self, Path(path))
