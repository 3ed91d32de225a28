"""Calling target hooks from the pipeline, with errors that name the hook.

A hook that raises, or returns something of the wrong type, is reported as
"target kind K, hook H: ..." so a user knows which extension to blame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..errors import TesseraError
from ..relay.module import IRModule
from ..runtime.module import CSourceModule
from ..target.toolchain import SourceFile
from ..target.errors import TargetError
from ..relay.expr import Function
from ..runtime.external import ExternalModule
from ..target.hooks import RELAY_TO_RUNTIME, RELAY_TO_TIR, TIR_TO_RUNTIME, UPDATE_CONSTANTS
from ..target.target import Target
from ..tir.stmt import PrimFunc
from ..transform.pass_infra import PassContext
from ..transform.plan_devices import DEVICE_ATTR  # also the PrimFunc attribute naming its piece

TARGET_ATTR = "target"  # PrimFunc attribute: the Target whose code generator builds it
# What TIRToRuntime returns: C source to compile (any executor), or a module that runs the
# PrimFuncs itself (graph executor only: the AOT executor calls every kernel from C).
RuntimeModule = CSourceModule | ExternalModule


def call_hook(target: Target, hook: str, fn: Callable[..., Any], args: tuple, expect: type | tuple,
              expect_text: str) -> Any:
    try:
        result = fn(*args)
    except TesseraError as err:
        raise type(err)(f"target kind {target.kind.name!r}, hook {hook}: {err}") from err
    except Exception as err:
        raise TargetError(
            f"target kind {target.kind.name!r}, hook {hook} failed: {type(err).__name__}: {err}"
        ) from err
    if not isinstance(result, expect):
        raise TargetError(
            f"target kind {target.kind.name!r}, hook {hook} returned {type(result).__name__}, "
            f"expected {expect_text}"
        )
    return result


def run_relay_to_tir(mod: IRModule, targets: Iterable[Target], ctx: PassContext) -> IRModule:
    """Run each kind's RelayToTIR pass once, in the order the targets are given."""
    seen: set[str] = set()
    for target in targets:
        hook = target.kind.relay_to_tir
        if hook is None or target.kind.name in seen:
            continue
        seen.add(target.kind.name)
        with ctx.made_current():  # a Pass reads the build's context when it is not handed one
            mod = call_hook(target, RELAY_TO_TIR, hook, (mod,), IRModule, "an IRModule")
    return mod


def run_relay_to_runtime(mod: IRModule, targets: Iterable[Target]) -> tuple[list[ExternalModule], dict[str, dict]]:
    """Compile every partition whose kind has RelayToRuntime into its own module.

    Returns the modules and, per global symbol, the constants each owns
    (from UpdateConstants), so they are exported with it exactly once.
    """
    by_kind = {t.kind.name: t for t in targets}
    modules: list[ExternalModule] = []
    constants: dict[str, dict] = {}
    for gv, func in mod.items():
        if not (isinstance(func, Function) and func.attrs.compiler):
            continue
        target = by_kind.get(func.attrs.compiler)
        if target is None:
            raise TargetError(f"partition @{gv.name_hint} is for {func.attrs.compiler!r}, which is not a target of this build")
        codegen = target.kind.relay_to_runtime
        if codegen is None:
            raise TargetError(
                f"partition @{gv.name_hint} for target kind {target.kind.name!r} was not lowered: the kind "
                f"registers neither {RELAY_TO_TIR} (or it left the function alone) nor {RELAY_TO_RUNTIME}"
            )
        module = call_hook(target, RELAY_TO_RUNTIME, codegen, (func,), ExternalModule, "an ExternalModule")
        symbol = func.attrs.global_symbol or gv.name_hint
        if symbol not in module.function_names():
            raise TargetError(
                f"target kind {target.kind.name!r}, hook {RELAY_TO_RUNTIME} returned a module without "
                f"function {symbol!r} (it has {module.function_names()})"
            )
        updater = target.kind.update_constants
        if updater is not None:
            owned = call_hook(target, UPDATE_CONSTANTS, updater, (func, symbol), dict, "a dict of arrays")
            constants[symbol] = owned
            module.bind_constants(owned)
        modules.append(module)
    return modules, constants


def primfunc_target(func: PrimFunc, default: Target) -> Target:
    target = func.attrs.get(TARGET_ATTR)
    return target if isinstance(target, Target) else default


def primfunc_piece(func: PrimFunc) -> str | None:
    """The named piece that runs `func` (None: the host, or an unnamed compilation)."""
    piece = func.attrs.get(DEVICE_ATTR)
    return piece if isinstance(piece, str) else None

def split_by_piece(mod: IRModule, host: Target) -> dict[tuple[str | None, Target], IRModule]:
    """PrimFuncs grouped by (named piece or None, target that builds them).

    Two pieces with equal targets stay apart: each is its own processor.
    """
    groups: dict[tuple[str | None, Target], dict] = {}
    for gv, func in mod.items():
        if isinstance(func, PrimFunc):
            key = (primfunc_piece(func), primfunc_target(func, host))
            groups.setdefault(key, {})[gv] = func
    return {k: IRModule(funcs) for k, funcs in groups.items()}


def piece_runtime(piece: str | None, mod: IRModule, target: Target) -> RuntimeModule:
    """`tir_to_runtime`, with the piece's name on its source files so pieces never collide."""
    module = tir_to_runtime(mod, target)
    if piece is not None and isinstance(module, CSourceModule):
        module.sources = [SourceFile(f"{piece}_{s.name}", s.text, s.cacheable) for s in module.sources]
    return module


def tir_to_runtime(mod: IRModule, target: Target) -> RuntimeModule:
    """The TIRToRuntime hook if the kind has one, else the kind's default codegen."""
    hook = target.kind.tir_to_runtime
    if hook is not None:
        module = call_hook(target, TIR_TO_RUNTIME, hook, (mod, target), (CSourceModule, ExternalModule),
                           "a runtime module (CSourceModule or ExternalModule)")
        if isinstance(module, ExternalModule):
            missing = sorted(gv.name_hint for gv, f in mod.items()
                             if isinstance(f, PrimFunc) and gv.name_hint not in module.function_names())
            if missing:
                raise TargetError(f"target kind {target.kind.name!r}, hook {TIR_TO_RUNTIME} returned a module "
                                  f"without functions {missing} (it has {module.function_names()})")
        return module
    codegen = target.kind.codegen
    if codegen is None:
        raise TargetError(
            f"target kind {target.kind.name!r} has neither a {TIR_TO_RUNTIME} hook nor a default code generator"
        )
    module = codegen(mod, target)
    if not isinstance(module, CSourceModule):
        raise TargetError(f"target kind {target.kind.name!r}: its code generator returned "
                          f"{type(module).__name__}, expected a CSourceModule")
    return module
