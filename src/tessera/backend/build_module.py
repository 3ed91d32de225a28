"""`tessera.build`: the compile pipeline of DESIGN.md, from Relay to a library."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Optional

import numpy as np

from ..errors import TesseraError
from ..relay.expr import Constant, Function, Var
from ..relay.module import IRModule
from ..relay.visitor import substitute
from ..target.target import Target, TargetLike
from ..transform.dead_code import DeadCodeElimination
from ..transform.fold_constant import FoldConstant
from ..transform.fuse_ops import FuseOps
from ..transform.infer_type import InferType
from ..transform.pass_infra import PassContext, Sequential
from ..transform.simplify_inference import DenseToMatmul, SimplifyInference
from .graph_codegen import _GraphBuilder
from .lower_te import LowerTE
from .target_hooks import run_relay_to_tir, split_by_target, tir_to_runtime
from .library import GraphExecutorLibrary

Progress = Callable[[str], None]


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


def as_target(target: TargetLike | None) -> Target:
    if target is None:
        return Target("c")
    return target if isinstance(target, Target) else Target(target)


def build(
    mod: IRModule | Function,
    target: TargetLike | None = "c",
    params: Optional[Mapping[str, np.ndarray]] = None,
    ctx: Optional[PassContext] = None,
    progress: Optional[Progress] = None,
) -> GraphExecutorLibrary:
    """Compile a Relay module for the graph executor.

    `target` is a Target, a target string ("c", "c -march=skylake") or an
    alias; the build reads its toolchain, code generator and hooks from it.
    `params` are bound as constants before optimisation (so weights fold);
    they come back as the library's parameters.
    """
    say = progress or (lambda msg: None)
    ctx = ctx or PassContext.current()
    target = as_target(target)
    host = target.host
    toolchain = host.kind.get_attr("toolchain")(host)
    if not toolchain.is_host:
        raise TesseraError(
            f"target {host} builds code for another machine; the graph executor runs in this process. "
            "Use the AOT executor for microcontroller targets."
        )
    if target.accelerators:
        names = ", ".join(a.kind.name for a in target.accelerators)
        raise TesseraError(f"target {target}: partitioning for accelerators ({names}) is not implemented yet")
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    t0 = time.perf_counter()
    if params:
        mod = mod.with_function("main", bind_params(mod.main, params))
    say("optimising graph")
    mod = optimize(mod, ctx)
    mod = run_relay_to_tir(mod, [host, *target.accelerators], ctx)
    say("lowering kernels to loops")
    mod = LowerTE()(mod, ctx)
    say("generating C")
    plan = _GraphBuilder(mod).build()
    modules = [tir_to_runtime(sub, t) for t, sub in split_by_target(mod, host).items()]
    csrc = modules[0] if modules else tir_to_runtime(IRModule({}), host)
    csrc.imports.extend(modules[1:])
    python_seconds = time.perf_counter() - t0
    say(f"compiling {len(csrc.sources)} C translation units")
    return GraphExecutorLibrary.compile(plan, csrc, mod, python_seconds)
