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
from ..target.errors import TargetError
from ..target.hooks import RELAY_TO_TIR, TIR_TO_RUNTIME
from ..target.target import Target
from ..tir.stmt import PrimFunc
from ..transform.pass_infra import PassContext

TARGET_ATTR = "target"  # PrimFunc attribute: the Target whose code generator builds it


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
        hook = target.get_hook(RELAY_TO_TIR)
        if hook is None or target.kind.name in seen:
            continue
        seen.add(target.kind.name)
        mod = call_hook(target, RELAY_TO_TIR, lambda m: hook(m, ctx), (mod,), IRModule, "an IRModule")
    return mod


def primfunc_target(func: PrimFunc, default: Target) -> Target:
    target = func.attrs.get(TARGET_ATTR)
    return target if isinstance(target, Target) else default


def split_by_target(mod: IRModule, host: Target) -> dict[Target, IRModule]:
    """PrimFuncs grouped by the target that builds them (unmarked ones: host)."""
    groups: dict[Target, dict] = {}
    for gv, func in mod.items():
        if isinstance(func, PrimFunc):
            groups.setdefault(primfunc_target(func, host), {})[gv] = func
    return {t: IRModule(funcs) for t, funcs in groups.items()}


def tir_to_runtime(mod: IRModule, target: Target) -> CSourceModule:
    """The TIRToRuntime hook if the kind has one, else the kind's default codegen."""
    hook = target.get_hook(TIR_TO_RUNTIME)
    if hook is not None:
        return call_hook(target, TIR_TO_RUNTIME, hook, (mod, target), CSourceModule, "a runtime module")
    codegen = target.kind.get_attr("codegen")
    if codegen is None:
        raise TargetError(
            f"target kind {target.kind.name!r} has neither a {TIR_TO_RUNTIME} hook nor a default code generator"
        )
    return codegen(mod, target)
