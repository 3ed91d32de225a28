"""The hooks a target kind can register to customise the compile flow.

Each constant is the key under which a kind stores the hook
(`kind.set_attr(RELAY_TO_TIR, pass_)`); `Target.get_hook(name)` finds it.
The standard pipeline (`tessera.build`) calls them at fixed points:

``RelayToTIR`` — a `tessera.transform.Pass` (IRModule -> IRModule). Runs
    after partitioning and before the default lowering. It lowers the Relay
    functions marked for its target into PrimFuncs of the same module and
    rewrites their call sites, so memory planning and the executors see its
    kernels like any other.

``TIRToRuntime`` — ``(IRModule, Target) -> runtime module``. Builds the
    target's PrimFuncs instead of the kind's default code generator; it may
    subclass the host C code generator and change only what differs.

``RelayToRuntime`` — ``(Function) -> runtime module``. Compiles a whole
    partition itself ("bring your own codegen"); the result is imported by
    the host module.

``UpdateConstants`` — ``(Function, symbol) -> {name: array}``. Tells the
    pipeline which constants a RelayToRuntime module owns, so they are
    exported with it exactly once.
"""

from __future__ import annotations

from collections.abc import Callable

RELAY_TO_TIR = "RelayToTIR"
TIR_TO_RUNTIME = "TIRToRuntime"
RELAY_TO_RUNTIME = "RelayToRuntime"
UPDATE_CONSTANTS = "UpdateConstants"

ALL_HOOKS = (RELAY_TO_TIR, TIR_TO_RUNTIME, RELAY_TO_RUNTIME, UPDATE_CONSTANTS)


def _is_pass(value: object) -> bool:
    from ..transform.pass_infra import Pass

    return isinstance(value, Pass)


# What a registered value must be, and how to say so when it is not.
HOOK_CONTRACTS: dict[str, tuple[Callable[[object], bool], str]] = {
    RELAY_TO_TIR: (_is_pass, "a tessera.transform.Pass (IRModule -> IRModule)"),
    TIR_TO_RUNTIME: (callable, "a callable (IRModule, Target) -> runtime module"),
    RELAY_TO_RUNTIME: (callable, "a callable (Function) -> runtime module"),
    UPDATE_CONSTANTS: (callable, "a callable (Function, symbol) -> {name: numpy array}"),
}
