"""The tuner: measure every tunable kernel's candidate schedules on this machine.

1. Find the workloads. The graph half of the build (`fuse`: optimise,
   partition, fuse) runs once; then each distinct fused kernel is lowered to
   loops with a ScheduleContext whose collector records every knob its
   operators consult. No C compiler runs. The tuner knows nothing about
   particular operators: whatever calls `sched.choose` is tuned.
2. Measure. For each workload, the fused kernel that first asked for it
   becomes a module of its own (its parameters are the inputs), built once per
   candidate configuration (forced on LowerTE), the C compiled in parallel. Candidates
   run in alternation on the same random inputs; the fastest sample per call
   counts (other processes only ever add time: on a shared machine a sample's
   median follows their load, its minimum the kernel).
   Each candidate's outputs must match the default's (a wrong schedule is a
   bug, not a fast result).
   With a `board` (an emulated Cortex-M board), each candidate is instead
   built with the AOT executor and run under QEMU, and the instructions of
   one call are counted: deterministic, so one run per candidate suffices,
   and outputs must be identical (integer kernels bit for bit).
3. Record every measurement in the TuningLog, saved after each workload, so
   an interrupted run resumes where it stopped: configurations the log holds
   for the same workload and target are not measured again. Timings are
   recorded with this machine's CPU (`cpu_key()`: model name and ISA level):
   resuming on another CPU measures afresh, and builds there ignore them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..backend.build_module import as_target, build_aot, build_graph, fuse, lower_fused
from ..backend.library import GraphExecutorLibrary
from ..backend.lower_te import lower_primitive
from ..errors import TesseraError
from ..micro.boards import get_board
from ..op.schedule_context import Choice, ScheduleContext
from ..op.tuning_log import Config, Record, TuningLog, Workload
from ..relay.expr import Call, Function, Var
from ..relay.module import IRModule
from ..relay.printer import expr_str
from ..relay.ty import TensorType
from ..relay.visitor import post_order
from ..runtime.graph_executor import GraphModule
from ..target.cpu_id import cpu_key
from ..target.named import is_named_targets
from ..target.target import Target, TargetLike
from ..transform.infer_type import infer_function
from ..transform.pass_infra import PassContext

Progress = Callable[[str], None]

MIN_SAMPLE_SECONDS = 2e-3  # a sample repeats the kernel until it lasts this long
MATCH_RTOL = 1e-3  # candidates' outputs against the default's, relative to the largest value


@dataclass(frozen=True)
class Task:
    """One workload to tune and the fused kernel that exercises it."""

    choice: Choice
    kernel: Function  # typed primitive function whose lowering asks for the workload
    calls: int = 1  # kernel calls of the model that ask for the workload

    @property
    def workload(self) -> Workload:
        return self.choice.workload

    @property
    def weight(self) -> int:
        """What the workload costs the model, as the kernels estimate it (multiply-adds over all calls)."""
        return self.choice.work * self.calls

    def configs(self, trials: int | None) -> list[dict[str, int]]:
        """The default first, then the other candidates in the kernel's order; at most `trials`."""
        default = dict(self.choice.default)
        rest = [dict(c) for c in self.choice.candidates if dict(c) != default]
        return ([default] + rest)[:trials]


@dataclass
class TaskResult:
    task: Task
    seconds: dict[str, float] = field(default_factory=dict)  # config (as text) -> seconds, this run's and the log's
    best: Config | None = None
    instructions: dict[str, int] = field(default_factory=dict)  # config (as text) -> count on the board (--board)

    @property
    def default_seconds(self) -> float | None:
        return self.seconds.get(config_text(self.task.choice.default))

    @property
    def default_instructions(self) -> int | None:
        return self.instructions.get(config_text(self.task.choice.default))

    @property
    def best_instructions(self) -> int | None:
        return self.instructions.get(config_text(self.best)) if self.best is not None else None


@dataclass
class Tuned:
    log: TuningLog
    results: list[TaskResult]
    measured: int  # configurations measured in this run
    seconds: float


def config_text(config: Config) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


def extract_tasks(mod: IRModule | Function, target: TargetLike = "c",
                  params: Mapping[str, np.ndarray] | None = None, ctx: PassContext | None = None) -> list[Task]:
    """The tunable workloads of a model, in execution order, without compiling any C."""
    tgt = _single_target(target)
    ctx = ctx or PassContext.current()
    fused = fuse(mod, tgt, params, ctx, lambda msg: None, "tune")
    main = infer_function(fused.main, fused)
    tasks: dict[Workload, Task] = {}
    lowered: dict[str, list[Workload]] = {}  # a fused kernel's text -> the workloads it asks for
    asked: list[Choice] = []
    # defaults depend on the target, as in the build
    sched = replace(ScheduleContext.for_build(tgt.host, ctx.config), collector=asked.append)
    for node in post_order(main.body, into_functions=False):
        if not (isinstance(node, Call) and isinstance(node.op, Function) and node.op.attrs.primitive):
            continue
        func = node.op
        if func.attrs.compiler:
            continue  # an external code generator's partition: no knobs of ours
        text = expr_str(func)
        if text not in lowered:
            asked.clear()
            lower_primitive(func, "tsgen_tune_probe", sched)
            lowered[text] = [choice.workload for choice in asked]
            for choice in asked:  # the first kernel to ask for a workload measures it
                tasks.setdefault(choice.workload, Task(choice, func, calls=0))
        for workload in lowered[text]:
            tasks[workload] = replace(tasks[workload], calls=tasks[workload].calls + 1)
    return list(tasks.values())


def tune(mod: IRModule | Function, target: TargetLike = "c", params: Mapping[str, np.ndarray] | None = None,
         log: TuningLog | str | os.PathLike | None = None, trials: int | None = None,
         budget: float | None = None, progress: Progress | None = None, repeat: int = 5,
         jobs: int | None = None, seed: int = 0, threads: int = 1, board: str | None = None) -> Tuned:
    """Measure candidate schedules for every tunable kernel of `mod` on this machine.

    `log`: a TuningLog, or a JSON path (read if it exists, rewritten after
    every workload); measurements it already holds are reused. `trials`: at
    most this many configurations per workload (the default counts as one).
    `budget`: stop starting new measurements after this many seconds (the
    log keeps what was measured); the workloads that cost the model most
    (the kernels' multiply-adds times their calls) are measured first.
    `jobs`: parallel C compilations.
    `threads`: threads each measured kernel runs on (1 by default: single-core
    timings are the least noisy, and the tile that is fastest per core stays
    fastest when the parallel loop shares the tiles among cores).
    `board`: count instructions on this emulated Cortex-M board under QEMU
    instead of timing on this machine; the target defaults to the board's
    core (another target must name the same core), and the records carry
    the board's name.
    """
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    if trials is not None and trials < 1:
        raise TesseraError(f"trials must be at least 1, got {trials}")
    path = Path(log) if isinstance(log, (str, os.PathLike)) else None
    if path is not None:
        log = TuningLog.load(path) if path.exists() else TuningLog()  # a corrupt log is an error, not overwritten
        if log.records:
            say(f"resuming from {path} ({len(log.records)} measurements)")
    log = log if isinstance(log, TuningLog) else TuningLog()
    tgt = _board_target(board, target) if board else _single_target(target)
    cpu = "" if board else cpu_key()  # QEMU's counts are the same on any host
    others = log.other_cpus(cpu) if cpu else {}
    if others:
        say(f"{sum(others.values())} measurements of the log were made on other CPUs "
            f"({', '.join(sorted(others))}): this CPU ({cpu}) is measured afresh")
    if not board and not tgt.host.kind.toolchain(tgt.host).is_host:
        raise TesseraError(f"target {tgt} builds code for another machine, which cannot be timed here; count "
                           "instructions on an emulated board instead (board=..., `tessera tune --board`)")
    where = board or ""
    ctx = PassContext.current()
    if cpu:
        say(f"timing on {cpu}: builds on other CPUs will not follow these timings")
    say("finding tunable kernels")
    tasks = extract_tasks(mod, tgt, params, ctx)
    if budget is not None:  # the budget goes to the kernels that cost the model most (stable: else in order)
        tasks.sort(key=lambda t: -t.weight)
    say(f"{len(tasks)} tunable workloads")
    results, measured = [], 0
    jobs = jobs or min(2, os.cpu_count() or 1)
    for k, task in enumerate(tasks, 1):
        result = TaskResult(task)
        results.append(result)
        configs = task.configs(trials)
        todo = [c for c in configs if not log.measured(task.workload, c, str(tgt.host), where, cpu)]
        head = f"[{k}/{len(tasks)}] {task.workload}"
        if budget is not None and time.perf_counter() - start > budget and todo:
            say(f"{head}: time budget spent, {len(todo)} configs not measured")
            todo = []
        if todo:
            say(f"{head}: measuring {len(todo)} of {len(configs)} configs" + (f" on {board}" if board else ""))
            if board:
                for config, count in zip(todo, _count_on_board(task, todo, tgt, ctx, board, jobs, seed)):
                    log.add(Record(task.workload, config, 0.0, str(tgt.host), board, count))
            else:
                for config, seconds in zip(todo, _measure(task, todo, tgt, ctx, repeat, jobs, seed, threads)):
                    log.add(Record(task.workload, config, seconds, str(tgt.host), cpu=cpu))
            measured += len(todo)
            if path is not None:
                log.save(path)
        for r in log.records:
            if r.workload != task.workload or r.target != str(tgt.host) or r.board != where or r.cpu != cpu:
                continue
            text = config_text(r.config)
            if r.instructions is not None:
                result.instructions[text] = r.instructions
            else:
                result.seconds[text] = min(r.seconds, result.seconds.get(text, np.inf))
        result.best = log.best(task.workload, among=task.choice.candidates, target=str(tgt.host),
                               prefer=task.choice.default, cpu=cpu)
        say(_summary(f"[{k}/{len(tasks)}]" if todo else f"{head} (from the log)", result))
    if path is not None:
        log.save(path)
    return Tuned(log, results, measured, time.perf_counter() - start)


def _summary(head: str, result: TaskResult) -> str:
    if result.best is None:
        return f"{head}: no measurement"
    text = f"{head}: best {config_text(result.best)}"
    if result.instructions:
        return text + f" {result.best_instructions} instructions, default {result.default_instructions}"
    best = result.seconds.get(config_text(result.best))
    default = result.default_seconds
    text += f" {best * 1e3:.3f} ms" if best is not None else ""
    return text + (f", default {default * 1e3:.3f} ms" if default is not None else "")


# ---------------------------------------------------------------- measuring


def kernel_module(task: Task) -> IRModule:
    """A module whose main calls the task's fused kernel; the kernel's parameters are its inputs."""
    params = tuple(Var(p.name_hint, p.checked_type) for p in task.kernel.params)
    return IRModule.from_expr(Function(params, Call(task.kernel, params)))


def _measure(task: Task, configs: Sequence[Config], target: Target, ctx: PassContext, repeat: int, jobs: int,
             seed: int, threads: int) -> list[float]:
    """Seconds per call of the task's kernel under each configuration: its fastest sample of `repeat`."""
    module = kernel_module(task)
    lowered = [lower_fused(module, target, ctx, lambda msg: None, "tune", forced={task.workload: config})
               for config in configs]
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # gcc runs outside the GIL
        libs: list[GraphExecutorLibrary] = list(pool.map(lambda low: build_graph(low, lambda msg: None), lowered))
    rng = np.random.default_rng(seed)
    inputs = {p.name_hint: _random(p.checked_type, rng) for p in task.kernel.params}
    modules = []
    for lib in libs:
        gm = GraphModule(lib, num_threads=threads, adaptive_threads=False)  # measured at `threads`, always
        for name, value in inputs.items():
            gm.set_input(name, value)
        gm.run()
        modules.append(gm)
    _check_outputs(task, configs, [[gm.get_output(i) for i in range(gm.num_outputs)] for gm in modules])
    number = max(1, int(MIN_SAMPLE_SECONDS / max(_once(modules[0]), 1e-9)))
    samples: list[list[float]] = [[] for _ in modules]
    for _ in range(repeat):  # alternate, so drift in the machine's load hits every candidate alike
        for gm, times in zip(modules, samples):
            t0 = time.perf_counter()
            for _ in range(number):
                gm.run()
            times.append((time.perf_counter() - t0) / number)
    return [min(times) for times in samples]


def _once(gm: GraphModule) -> float:
    t0 = time.perf_counter()
    gm.run()
    return time.perf_counter() - t0


def _random(ty: object, rng: np.random.Generator) -> np.ndarray:
    if not isinstance(ty, TensorType):
        raise TesseraError(f"a tunable kernel takes a non-tensor parameter of type {ty}")
    dtype = np.dtype(ty.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(ty.shape).astype(dtype)
    if dtype.itemsize == 1:  # int8 / uint8 activations (indices are int32 / int64): the whole range
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, ty.shape, endpoint=True).astype(dtype)
    return np.zeros(ty.shape, dtype)  # integer inputs may be indices: zero is always in range


def _count_on_board(task: Task, configs: Sequence[Config], target: Target, ctx: PassContext, board: str,
                    jobs: int, seed: int) -> list[int]:
    """Instructions of one call of the task's kernel under each configuration, on the emulated board."""
    module = kernel_module(task)
    rng = np.random.default_rng(seed)
    inputs = [_random(p.checked_type, rng) for p in task.kernel.params]
    toolchain = target.host.kind.toolchain(target.host)

    def count(config: Config) -> tuple[list[np.ndarray], int]:
        lowered = lower_fused(module, target, ctx, lambda msg: None, "tune", forced={task.workload: config})
        lib = build_aot(lowered, toolchain, "tune", lambda msg: None)
        outputs, run = lib.run_board(board, inputs, count_instructions=True)
        if run.inference_instructions is None:
            raise TesseraError(f"{task.workload}: QEMU counted no instructions on {board}")
        return outputs, run.inference_instructions

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # gcc and QEMU are processes of their own
        runs = list(pool.map(count, configs))
    _check_outputs(task, configs, [outputs for outputs, _ in runs])
    return [n for _, n in runs]


def _check_outputs(task: Task, configs: Sequence[Config], outs: Sequence[Sequence[np.ndarray]]) -> None:
    for config, got in zip(configs[1:], outs[1:]):
        for a, b in zip(got, outs[0]):
            scale = float(np.max(np.abs(b))) if b.size else 0.0
            exact = not np.issubdtype(b.dtype, np.floating)  # integer kernels: bit for bit
            if (not np.array_equal(a, b)) if exact else not np.allclose(a, b, rtol=MATCH_RTOL, atol=MATCH_RTOL * scale):
                raise TesseraError(f"{task.workload}: configuration {config_text(config)} computes different "
                                   f"outputs from {config_text(configs[0])} (a schedule bug)")


def _board_target(board: str, target: TargetLike | None) -> Target:
    """The target a board's kernels are built for: the board's core unless `target` names it too."""
    spec = get_board(board)
    if target is None or str(target) == "c":
        return as_target(spec.target_string)
    tgt = _single_target(target)
    if tgt.host.get("mcpu") != spec.cpu:
        raise TesseraError(f"target {tgt} does not build for {board}'s {spec.cpu}; tune it with -t "
                           f"{spec.target_string!r} or leave -t out")
    return tgt


def _single_target(target: TargetLike) -> Target:
    if is_named_targets(target):
        raise TesseraError(f"tune one target at a time, got named pieces {target!r}")
    return as_target(target)
