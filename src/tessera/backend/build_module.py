"""`tessera.build`: the compile pipeline of DESIGN.md, from Relay to a library."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional, overload

import numpy as np

from ..crt import SOURCE_DIR as CRT_SOURCE_DIR
from ..errors import TesseraError, did_you_mean
from ..relay.expr import Constant, Function
from ..relay.module import IRModule
from ..relay.visitor import substitute
from ..target.named import CompilationConfig, is_named_targets, parse_named_targets
from ..target.target import Target, TargetLike
from ..target.toolchain import SourceFile, Toolchain
from ..tir.stmt import PrimFunc
from ..transform.dead_code import DeadCodeElimination
from ..transform.fold_constant import FoldConstant
from ..transform.fuse_ops import FuseOps
from ..transform.infer_type import InferType
from ..transform.int8_layout import Int8Layout
from ..transform.pack_gemm_weights import PackGemmWeights
from ..transform.pass_infra import Pass, PassContext, Sequential
from ..transform.pointwise_products import PointwiseConvOnVectors
from ..transform.pooled_branch_bias import PooledBranchAsBias
from ..transform.quantize_to_integer import QuantizeToInteger
from ..transform.recognise_activations import RecogniseActivations
from ..transform.simplify_inference import DenseToMatmul, SimplifyInference
from ..transform.split_dilated_conv import SplitDilatedConv
from ..transform.trim_conv_taps import TrimConvTaps
from ..op.annotation import HOST
from ..op.tuning_log import Config, Workload
from ..transform.annotate_target import RemovePins, check_pins
from ..transform.merge_composite import InlineComposites
from ..transform.partition import partition_for, partition_pipeline
from ..transform.plan_devices import ExpandFunctionPins, PlanDevices
from .concat_views import view_only_kernels, without_kernels
from .graph_codegen import _GraphBuilder, add_segments
from .lower_te import LowerTE
from .lift_workspace import LiftWorkspaces, SliceInt8Scratch
from .program_memory import MemoryOptions, with_aliasing
from .target_hooks import piece_runtime, run_relay_to_runtime, run_relay_to_tir, split_by_piece, tir_to_runtime
from .library import GraphExecutorLibrary, compile_graph_library
from ..runtime.external import ExternalModule
from ..runtime.module import CSourceModule
from ..runtime.output_stage import DYNAMIC_TAIL_ATTR, DynamicTail
from ..target.hooks import TIR_TO_RUNTIME

if TYPE_CHECKING:  # the AOT flow loads on demand
    from .aot.library import AotLibrary

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


def optimize_pipeline() -> Sequential:
    return Sequential(
        [InferType(), DeadCodeElimination(), QuantizeToInteger(), SimplifyInference(), FoldConstant(), DenseToMatmul(),
         FoldConstant(), TrimConvTaps(), SplitDilatedConv(), PooledBranchAsBias(),
         PointwiseConvOnVectors(), RecogniseActivations()],
        name="optimize",
    )


def optimize(mod: IRModule, ctx: PassContext) -> IRModule:
    return optimize_pipeline()(mod, ctx)


def as_target(target: TargetLike | None) -> Target:
    if target is None:
        return Target("c")
    return target if isinstance(target, Target) else Target(target)


def resolve_target(target: TargetLike | CompilationConfig | None) -> tuple[Target, CompilationConfig | None]:
    """The target to compile for, and the named pieces when `target` describes several.

    Named pieces ("name: target; ...", or a CompilationConfig) compile for their host piece.
    """
    if not (isinstance(target, CompilationConfig) or is_named_targets(target)):
        return as_target(target), None
    config = parse_named_targets(target)
    for name, piece in config.pieces.items():
        if name != config.host_name and piece.accelerators:
            raise TesseraError(f"piece {name!r} ({piece}) has accelerators; only the host piece "
                               f"{config.host_name!r} may have them")
    return config.host, config


def partition(mod: IRModule, target: Target, ctx: PassContext, say: Progress, prefix: str,
              config: CompilationConfig | None = None) -> IRModule:
    """Run the partition pipeline for each accelerator, in the target's order.

    In a named compilation, device planning then gives every remaining call
    a piece; otherwise the pins have done their job and go.
    """
    accelerators = target.accelerators
    pieces = list(config.pieces) if config is not None else []
    mod = ExpandFunctionPins()(mod, ctx)
    check_pins(mod.main, [HOST, *(a.kind.name for a in accelerators), *pieces])
    for accel in accelerators:
        say(f"partitioning for {accel.kind.name}")
        mod = partition_for(mod, accel, ctx, prefix, target.host)
    mod = InlineComposites()(mod, ctx)
    if config is not None:
        say(f"placing calls on pieces {', '.join(pieces)}")
        return PlanDevices(config)(mod, ctx)
    return RemovePins()(mod, ctx)


@dataclass
class Lowered:
    """A module after the shared part of the pipeline: every kernel is TIR."""

    mod: IRModule
    partitioned: IRModule
    target: Target
    externals: list
    owned_constants: dict
    started: float
    config: CompilationConfig | None = None  # the named pieces, for named compilations
    memory: MemoryOptions = MemoryOptions()

    @property
    def host_piece(self) -> str | None:
        return self.config.host_name if self.config is not None else None

    def code_modules(self, mod: IRModule, executor: str
                     ) -> tuple[CSourceModule, list[tuple[str | None, CSourceModule]], list[ExternalModule]]:
        """The host piece's C module, every other (piece, C module), each built by its own target, and the
        external modules TIRToRuntime hooks returned (the graph executor calls them; AOT refuses them)."""
        host = self.target.host
        modules, external = [], []
        for (piece, target), sub in split_by_piece(mod, host).items():
            module = piece_runtime(piece, sub, target)
            if isinstance(module, CSourceModule):
                modules.append(((piece, target), module))
            elif executor == "aot":
                raise TesseraError(
                    f"target kind {target.kind.name!r}: its {TIR_TO_RUNTIME} hook returned "
                    f"{type(module).__name__}, not C source; the AOT executor calls every kernel from C "
                    f"({', '.join(sorted(module.function_names()))}). Use the graph executor for it.")
            else:
                external.append(module)
        host_key = (self.host_piece, host)
        host_module = next((m for key, m in modules if key == host_key), None)
        if host_module is None:
            built = tir_to_runtime(IRModule({}), host)
            if not isinstance(built, CSourceModule):
                raise TesseraError(f"host target {host}: its {TIR_TO_RUNTIME} hook must return C source")
            host_module = built
        return host_module, [(key[0], m) for key, m in modules if m is not host_module], external


EXECUTORS = ("graph", "aot")


def fuse(mod: IRModule | Function, target: Target, params: Optional[Mapping[str, np.ndarray]], ctx: PassContext,
         say: Progress, mod_name: str, config: CompilationConfig | None = None) -> IRModule:
    """The graph half of the pipeline: optimise, partition, place and fuse.

    Every call that stays on a host target is then a call of a primitive
    function, the unit LowerTE turns into one kernel (and the unit the tuner
    measures).
    """
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    prefix = f"tsgen_{mod_name}_"
    if params:
        mod = mod.with_function("main", bind_params(mod.main, params))
    say("optimising graph")
    mod = optimize(mod, ctx)
    mod = Int8Layout(target)(mod, ctx)  # the int8 region channels innermost, where the target wants it
    mod = partition(mod, target, ctx, say, prefix, config)
    if config is None:  # (named pieces may place a product on a core of another vector width)
        mod = PackGemmWeights(target.host)(mod, ctx)  # weights of host products in the GEMM's panel order
    return FuseOps()(mod, ctx)


def lower_fused(mod: IRModule, target: Target, ctx: PassContext, say: Progress, mod_name: str,
                config: CompilationConfig | None = None, started: float | None = None,
                forced: Mapping[Workload, Config] | None = None) -> Lowered:
    """The loop half: target hooks, then every primitive function to TIR (no C compiler runs).

    `forced`: schedule configurations to impose per workload (how the tuner builds its candidates).
    """
    t0 = time.perf_counter() if started is None else started
    partitioned = mod
    with ctx.made_current():  # passes a hook runs without a context see the build's
        mod = run_relay_to_tir(mod, [*target.accelerators, target.host], ctx)
        externals, owned = run_relay_to_runtime(mod, target.accelerators)
        say("lowering kernels to loops")
        pieces = config.pieces if config is not None else None
        mod = LowerTE(target.host, f"tsgen_{mod_name}_", pieces, forced)(mod, ctx)
    mod = SliceInt8Scratch()(mod, ctx)  # int8 scratch one row / plane at a time, inside its reader's loop
    mod = LiftWorkspaces()(mod, ctx)  # kernel scratch becomes planned memory
    return Lowered(mod, partitioned, target, externals, owned, t0, config, MemoryOptions.from_config(ctx.config))


def lower_to_tir(mod: IRModule | Function, target: Target, params: Optional[Mapping[str, np.ndarray]],
                 ctx: PassContext, say: Progress, mod_name: str, config: CompilationConfig | None = None) -> Lowered:
    t0 = time.perf_counter()
    fused = fuse(mod, target, params, ctx, say, mod_name, config)
    return lower_fused(fused, target, ctx, say, mod_name, config, t0)


def pipeline_pass_names(target: TargetLike | CompilationConfig | None) -> tuple[str, ...]:
    """The names of the passes `build()` runs for `target`, in order: what pass instruments see
    (a Sequential such as `optimize` under its own name, then its passes). Passes an opt level
    turns off are listed too."""
    compile_target, config = resolve_target(target)
    stages: list[Pass] = [optimize_pipeline(), Int8Layout(compile_target), ExpandFunctionPins()]
    stages += [partition_pipeline(accel, host=compile_target.host) for accel in compile_target.accelerators]
    stages += [InlineComposites(), PlanDevices(config) if config is not None else RemovePins()]
    stages += [FuseOps()] if config is not None else [PackGemmWeights(compile_target.host), FuseOps()]
    hooks = [t.kind.relay_to_tir for t in [*compile_target.accelerators, compile_target.host]]
    stages += [hook for hook in hooks if isinstance(hook, Pass)]  # (a hook may be a plain function)
    names = [name for stage in stages for name in _names(stage)]
    names += [LowerTE.name, SliceInt8Scratch.name, LiftWorkspaces.name]
    return tuple(dict.fromkeys(names))


def _names(p: Pass) -> list[str]:
    inner = [name for sub in p.passes for name in _names(sub)] if isinstance(p, Sequential) else []
    return [p.name, *inner]


def check_mod_name(mod_name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", mod_name):
        raise TesseraError(f"mod_name {mod_name!r} must be a C identifier (letters, digits, underscore)")
    return mod_name


BuildTarget = TargetLike | CompilationConfig | None


# The executor decides what build() returns: a library to call here, or standalone C.
@overload
def build(mod: IRModule | Function, target: BuildTarget = "c", params: Optional[Mapping[str, np.ndarray]] = None,
          ctx: Optional[PassContext] = None, progress: Optional[Progress] = None,
          executor: Literal["graph"] = "graph", mod_name: str = "default") -> GraphExecutorLibrary: ...
@overload
def build(mod: IRModule | Function, target: BuildTarget = "c", params: Optional[Mapping[str, np.ndarray]] = None,
          ctx: Optional[PassContext] = None, progress: Optional[Progress] = None, *,
          executor: Literal["aot"], mod_name: str = "default") -> AotLibrary: ...
@overload
def build(mod: IRModule | Function, target: BuildTarget = "c", params: Optional[Mapping[str, np.ndarray]] = None,
          ctx: Optional[PassContext] = None, progress: Optional[Progress] = None,
          executor: str = "graph", mod_name: str = "default") -> GraphExecutorLibrary | AotLibrary: ...
def build(
    mod: IRModule | Function,
    target: BuildTarget = "c",
    params: Optional[Mapping[str, np.ndarray]] = None,
    ctx: Optional[PassContext] = None,
    progress: Optional[Progress] = None,
    executor: str = "graph",
    mod_name: str = "default",
) -> GraphExecutorLibrary | AotLibrary:
    """Compile a Relay module.

    `target` is a Target, a target string ("c", "c -mcpu=cortex-m7") or an
    alias ("blas"); the build reads its toolchain, code generators, hooks and
    accelerators (partitioned in order) from it. Named pieces
    ("little: c -mcpu=cortex-m0; big: c -mcpu=cortex-m7", or a
    CompilationConfig) spread the calls over several processors: the first
    piece is the host, which runs the executor. `params` are bound as
    constants before optimisation (so weights fold). `executor="graph"`
    returns a library for the graph executor on this machine;
    `executor="aot"` returns standalone C for any machine (an AotLibrary),
    with symbols prefixed `tsgen_<mod_name>_`.
    """
    say = progress or (lambda msg: None)
    ctx = ctx or PassContext.current()
    compile_target, config = resolve_target(target)
    check_mod_name(mod_name)
    if executor not in EXECUTORS:
        raise TesseraError(f"unknown executor {executor!r}{did_you_mean(executor, EXECUTORS)}; valid: {', '.join(EXECUTORS)}")
    host = compile_target.host
    toolchain = host.kind.toolchain(host)
    if executor == "graph" and not toolchain.is_host:
        raise TesseraError(
            f"target {host} builds code for another machine; the graph executor runs in this process. "
            "Use executor='aot' for microcontroller targets."
        )
    if executor == "graph" and config is not None:
        for name, piece in config.pieces.items():
            if not piece.kind.toolchain(piece).is_host:
                raise TesseraError(f"piece {name!r} ({piece}) builds code for another machine; the graph "
                                   "executor runs every piece in this process. Use executor='aot'.")
    tail = _dynamic_tail(mod)
    if tail is not None and executor != "graph":
        raise TesseraError(f"the model ends in operators of data-dependent output shape ({tail.stage.function}, "
                           "run by an external module after the graph); only the graph executor runs them. "
                           "Use executor='graph'.")
    lowered = lower_to_tir(mod, compile_target, params, ctx, say, mod_name, config)
    if executor == "aot":
        return build_aot(lowered, toolchain, mod_name, say)
    lib = build_graph(lowered, say)
    if tail is not None:
        lib.external_modules.append(tail.module)
        lib.output_stage = tail.stage
    return lib


def _dynamic_tail(mod: IRModule | Function) -> DynamicTail | None:
    """The tail of data-dependent shapes an importer left for an output stage (runtime/output_stage.py)."""
    main = mod if isinstance(mod, Function) else mod["main"]
    tail = main.attrs.extra.get(DYNAMIC_TAIL_ATTR) if isinstance(main, Function) else None
    return tail if isinstance(tail, DynamicTail) else None


def build_graph(lowered: Lowered, say: Progress) -> GraphExecutorLibrary:
    mod = lowered.mod
    say("generating C")
    plan = _GraphBuilder(mod, lowered.memory).build()
    assert plan.program is not None
    mod = with_aliasing(mod, plan.program.steps, plan.program.kernels)  # no `restrict` where memory is shared
    # the copies of concatenations computed in place are never called: no C for them
    uncalled = view_only_kernels(plan.program.steps)
    host_module, others, external = lowered.code_modules(without_kernels(mod, uncalled), "graph")
    host_module.imports.extend(m for _, m in others)
    run_elsewhere = {name for m in external for name in m.function_names()}  # not in the C segments
    kernels = {gv.name_hint: f for gv, f in mod.items()
               if isinstance(f, PrimFunc) and gv.name_hint not in run_elsewhere | uncalled}
    host_module.sources.append(SourceFile("graph_segments.c", add_segments(plan, kernels)))
    python_seconds = time.perf_counter() - lowered.started
    say(f"compiling {len(host_module.units())} C translation units")
    lib = compile_graph_library(plan, host_module, mod, python_seconds, [*lowered.externals, *external],
                                lowered.owned_constants)
    lib.partitioned_mod = lowered.partitioned
    return lib


def _model_sources(module: CSourceModule) -> list[SourceFile]:
    """A module's generated sources and the C files its target added (extra_sources).

    CRT files among the extra sources stay out: the AOT output ships its own
    runtime (the MLF `runtime/` folder), and the graph executor's CRT (heap,
    threads) is not part of it.
    """
    added = [p for p in module.extra_sources if p.resolve().parent != CRT_SOURCE_DIR]
    return [*module.sources, *(SourceFile(p.name, p.read_text()) for p in added)]


def build_aot(lowered: Lowered, toolchain: Toolchain, mod_name: str, say: Progress) -> AotLibrary:
    from ..codegen.c_source import CodeGenC
    from ..relay.printer import module_str
    from .aot.executor import build_executor
    from .aot.library import AotLibrary, PieceCode
    from .aot.plan import build_program

    if lowered.externals:
        names = ", ".join(sorted(f for m in lowered.externals for f in m.function_names()))
        raise TesseraError(f"the AOT executor runs C kernels only; partitions {names} were compiled into "
                           "external runtime modules (RelayToRuntime). Use the graph executor for them.")
    mod, host = lowered.mod, lowered.target.host
    say("planning memory")
    program = build_program(mod, mod_name, lowered.memory, host.kind.name)
    mod = with_aliasing(mod, program.steps, program.kernels)  # no `restrict` where memory is shared
    say("generating C")
    uncalled = view_only_kernels(program.steps)  # copies of concatenations computed in place
    host_module, others, _ = lowered.code_modules(without_kernels(mod, uncalled), "aot")
    modules = [host_module, *(m for _, m in others)]
    # the host folder holds the host piece's kernels and those of library targets (e.g. blas);
    # every other named piece gets a folder of its own
    pieces = {name: m for name, m in others if name is not None}
    # keyed by name and text: two targets adding the same C file link it once
    sources = list({(s.name, s.text): s for m in modules if m not in pieces.values()
                    for s in _model_sources(m)}.values())
    # libraries that kernels from target hooks call (e.g. -lopenblas) must reach the final link
    link_flags = list(dict.fromkeys(f for m in modules for f in m.toolchain.link_flags))
    gen = CodeGenC()
    for name, func in program.kernels.items():
        if name not in uncalled:
            gen.declare(func)
    gen.add_function(build_executor(program))
    sources.append(SourceFile(f"tsgen_{mod_name}_executor.c", gen.source()))

    def prefixed(files: Sequence[SourceFile]) -> list[SourceFile]:
        return [SourceFile(f"tsgen_{mod_name}_{s.name}" if not s.name.startswith("tsgen_") else s.name, s.text)
                for s in files]

    config = lowered.config  # named pieces other than the host exist only in a named compilation
    piece_code = {name: PieceCode(name, config[name], m.toolchain, prefixed(_model_sources(m)))
                  for name, m in pieces.items()} if config is not None else {}
    return AotLibrary(program, lowered.target, toolchain, prefixed(sources), module_str(lowered.partitioned),
                      time.perf_counter() - lowered.started, partitioned_mod=lowered.partitioned,
                      link_flags=link_flags or list(toolchain.link_flags), pieces=piece_code,
                      config=lowered.config)
