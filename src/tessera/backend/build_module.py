"""`tessera.build`: the compile pipeline of DESIGN.md, from Relay to a library."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Optional

import numpy as np

from ..codegen.c_source import CodeGenC
from ..crt import INCLUDE_DIR, source as crt_source
from ..errors import TesseraError
from ..relay.expr import Constant, Function, Var
from ..relay.module import IRModule
from ..relay.visitor import substitute
from ..runtime.module import CSourceModule
from ..target.toolchain import SourceFile, Toolchain
from ..tir.stmt import PrimFunc
from ..transform.dead_code import DeadCodeElimination
from ..transform.fold_constant import FoldConstant
from ..transform.fuse_ops import FuseOps
from ..transform.infer_type import InferType
from ..transform.pass_infra import PassContext, Sequential
from ..transform.simplify_inference import DenseToMatmul, SimplifyInference
from .graph_codegen import _GraphBuilder
from .lower_te import LowerTE
from .library import GraphExecutorLibrary

Progress = Callable[[str], None]

# Kernels per translation unit: enough to amortise gcc start-up, few enough
# that two cores share the work evenly.
KERNELS_PER_UNIT = 24


def bind_params(func: Function, params: Mapping[str, np.ndarray]) -> Function:
    """Replace parameters named in `params` by constants."""
    mapping = {}
    keep = []
    names = {p.name_hint for p in func.params}
    unknown = sorted(set(params) - names)
    if unknown:
        raise TesseraError(f"params {unknown} match no parameter of main (has: {sorted(names)})")
    for p in func.params:
        if p.name_hint in params:
            mapping[id(p)] = Constant(np.asarray(params[p.name_hint]))
        else:
            keep.append(p)
    body = substitute(func.body, mapping)
    return Function(tuple(keep), body, None, func.attrs)


def optimize(mod: IRModule, ctx: PassContext) -> IRModule:
    seq = Sequential(
        [InferType(), DeadCodeElimination(), SimplifyInference(), FoldConstant(), DenseToMatmul(),
         FoldConstant(), FuseOps()],
        name="optimize",
    )
    return seq(mod, ctx)


def generate_c(mod: IRModule, toolchain: Toolchain) -> CSourceModule:
    kernels = [f for _, f in sorted(mod.items(), key=lambda kv: kv[0].name_hint) if isinstance(f, PrimFunc)]
    units = max(1, math.ceil(len(kernels) / KERNELS_PER_UNIT))
    sources = []
    names = []
    for u in range(units):
        gen = CodeGenC()
        for f in kernels[u::units]:
            gen.add_function(f)
        sources.append(SourceFile(f"kernels_{u}.c", gen.source()))
        names += gen.function_names
    return CSourceModule(sources, names, toolchain, extra_sources=[crt_source("workspace_heap.c")])


def host_toolchain() -> Toolchain:
    return Toolchain(include_dirs=(INCLUDE_DIR,))


def build(
    mod: IRModule | Function,
    target: object = "c",
    params: Optional[Mapping[str, np.ndarray]] = None,
    ctx: Optional[PassContext] = None,
    progress: Optional[Progress] = None,
) -> GraphExecutorLibrary:
    """Compile a Relay module for the graph executor.

    `params` are bound as constants before optimisation (so weights fold);
    they come back as the library's parameters.
    """
    say = progress or (lambda msg: None)
    ctx = ctx or PassContext.current()
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if target not in ("c", None):
        raise TesseraError(f"unsupported target {target!r}; this build supports 'c'")
    t0 = time.perf_counter()
    if params:
        mod = mod.with_function("main", bind_params(mod.main, params))
    say("optimising graph")
    mod = optimize(mod, ctx)
    say("lowering kernels to loops")
    mod = LowerTE()(mod, ctx)
    say("generating C")
    plan = _GraphBuilder(mod).build()
    toolchain = host_toolchain()
    csrc = generate_c(mod, toolchain)
    python_seconds = time.perf_counter() - t0
    say(f"compiling {len(csrc.sources)} C translation units")
    return GraphExecutorLibrary.compile(plan, csrc, mod, python_seconds)
