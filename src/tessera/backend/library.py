"""Make the graph executor's library from a plan: compile its C, load it, keep the build's artefacts.

The library class itself is the runtime's (`runtime/graph_library.py`), so
that loading an exported file needs no compiler module.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from ..relay.module import IRModule
from ..runtime.external import ExternalModule
from ..runtime.graph_library import GraphExecutorLibrary
from ..runtime.module import CSourceModule, build_and_load
from .graph_codegen import GraphPlan

__all__ = ["GraphExecutorLibrary", "compile_graph_library"]


def compile_graph_library(plan: GraphPlan, csrc: CSourceModule, ir_mod: IRModule, python_seconds: float,
                          external_modules: Sequence[ExternalModule] = (),
                          external_constants: Mapping[str, Mapping[str, np.ndarray]] | None = None
                          ) -> GraphExecutorLibrary:
    t0 = time.perf_counter()
    so = build_and_load(csrc)
    names = [plan.nodes[n].name for n in plan.input_nodes]
    lib = GraphExecutorLibrary(plan.to_json(), plan.params, csrc, so, ir_mod, python_seconds,
                               time.perf_counter() - t0, names, external_modules, external_constants)
    lib.graph_plan = plan  # steps, tensors and the memory plan, for reports
    return lib
