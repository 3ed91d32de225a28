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
from ..op.annotation import HOST
from ..transform.annotate_target import RemovePins, check_pins
from ..transform.partition import partition_for
from .graph_codegen import _GraphBuilder
from .lower_te import LowerTE
from .target_hooks import run_relay_to_runtime, run_relay_to_tir, split_by_target, tir_to_runtime
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
         FoldConstant()],
        name="optimize",
    )
    return seq(mod, ctx)


def as_target(target: TargetLike | None) -> Target:
    if target is None:
        return Target("c")
    return target if isinstance(target, Target) else Target(target)


def partition(mod: IRModule, target: Target, ctx: PassContext, say: Progress) -> IRModule:
    """Run the partition pipeline for each accelerator, in the target's order."""
    accelerators = target.accelerators
    check_pins(mod.main, [HOST, *(a.kind.name for a in accelerators)])
    for accel in accelerators:
        say(f"partitioning for {accel.kind.name}")
        mod = partition_for(mod, accel, ctx)
    return RemovePins()(mod, ctx)


def build(
    mod: IRModule | Function,
    target: TargetLike | None = "c",
    params: Optional[Mapping[str, np.ndarray]] = None,
    ctx: Optional[PassContext] = None,
    progress: Optional[Progress] = None,
) -> GraphExecutorLibrary:
    """Compile a Relay module for the graph executor.

    `target` is a Target, a target string ("c", "c -march=skylake") or an
    alias ("blas"); the build reads its toolchain, code generators, hooks and
    accelerators (partitioned in order) from it. `params` are bound as
    constants before optimisation (so weights fold); they come back as the
    library's parameters.
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
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    t0 = time.perf_counter()
    if params:
        mod = mod.with_function("main", bind_params(mod.main, params))
    say("optimising graph")
    mod = optimize(mod, ctx)
    mod = partition(mod, target, ctx, say)
    mod = FuseOps()(mod, ctx)
    partitioned = mod
    targets = [*target.accelerators, host]
    mod = run_relay_to_tir(mod, targets, ctx)
    externals, owned_constants = run_relay_to_runtime(mod, target.accelerators)
    say("lowering kernels to loops")
    mod = LowerTE()(mod, ctx)
    say("generating C")
    plan = _GraphBuilder(mod).build()
    modules = [tir_to_runtime(sub, t) for t, sub in split_by_target(mod, host).items()]
    host_module = next((m for m, t in zip(modules, split_by_target(mod, host)) if t == host), None)
    if host_module is None:
        host_module = tir_to_runtime(IRModule({}), host)
    host_module.imports.extend(m for m in modules if m is not host_module)
    python_seconds = time.perf_counter() - t0
    say(f"compiling {len(host_module.units())} C translation units")
    lib = GraphExecutorLibrary.compile(plan, host_module, mod, python_seconds, externals, owned_constants)
    lib.partitioned_mod = partitioned
    return lib
