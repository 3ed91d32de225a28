"""The typed contract of a target kind: its hooks and per-kind data.

Every entry is a named field of `TargetKind`, with the type below, checked
when it is set. The four hooks keep TVM's names as `set_attr` keys
(`kind.set_attr(RELAY_TO_TIR, pass_)`); the other fields have their own
setters (`set_toolchain`, `set_pattern_table`, ...). The standard pipeline
(`tessera.build`) calls the hooks at fixed points:

``RelayToTIR`` — ``IRModule -> IRModule`` (a `tessera.transform.Pass` is
    one). Runs after partitioning and before the default lowering. It lowers
    the Relay functions marked for its target into PrimFuncs of the same
    module and rewrites their call sites, so memory planning and the
    executors see its kernels like any other.

``TIRToRuntime`` — ``(IRModule, Target) -> runtime module``. Builds the
    target's PrimFuncs instead of the kind's default code generator; it may
    subclass the host C code generator and change only what differs.

``RelayToRuntime`` — ``(Function) -> runtime module``. Compiles a whole
    partition itself ("bring your own codegen"); the result is imported by
    the host module.

``UpdateConstants`` — ``(Function, symbol) -> {name: array}``. Tells the
    pipeline which constants a RelayToRuntime module owns, so they are
    exported with it exactly once.

Runtime modules are typed `object` here: they live in `tessera.runtime`,
above this package; the pipeline checks what a hook returns and names the
kind and hook when it is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, Union

import numpy as np

from ..relay.expr import Call, Function
from ..relay.module import IRModule
from ..relay.pattern_table import PatternEntry

if TYPE_CHECKING:
    from .target import Target
    from .toolchain import Toolchain

# Final, so each constant has its Literal type and selects its `TargetKind.set_attr` overload.
RELAY_TO_TIR: Final = "RelayToTIR"
TIR_TO_RUNTIME: Final = "TIRToRuntime"
RELAY_TO_RUNTIME: Final = "RelayToRuntime"
UPDATE_CONSTANTS: Final = "UpdateConstants"

ALL_HOOKS = (RELAY_TO_TIR, TIR_TO_RUNTIME, RELAY_TO_RUNTIME, UPDATE_CONSTANTS)


class RelayToTIR(Protocol):
    """Lowers the partitions of its kind to PrimFuncs; a `Pass` is one."""

    def __call__(self, mod: IRModule, /) -> IRModule: ...


class OperatorView(Protocol):
    """What a `supports_op` rule may read of an operator (`tessera.op.Op` has these)."""

    @property
    def name(self) -> str: ...

    @property
    def pattern(self) -> int: ...  # an OpPattern, an IntEnum

    @property
    def compute(self) -> object: ...  # None when the op has no TE compute


TIRToRuntime = Callable[[IRModule, "Target"], object]
RelayToRuntime = Callable[[Function], object]
UpdateConstants = Callable[[Function, str], Mapping[str, np.ndarray]]
ToolchainFor = Callable[["Target"], "Toolchain"]
Validate = Callable[["Target"], None]  # raises TargetError for impossible attribute combinations
Codegen = Callable[[IRModule, "Target"], object]  # the kind's default TIR -> runtime module
SupportedOps = Mapping[str, Union[bool, Callable[[Call], bool]]]
SupportsOp = Callable[["Target", OperatorView], bool]


@dataclass(frozen=True)
class FieldSpec:
    """One field of the contract: its attribute name, what it must be, and why it exists."""

    name: str  # attribute of TargetKind
    expects: str  # shown in registration errors and by `tessera targets`
    doc: str
    hook: str | None = None  # the TVM-style set_attr key, for the four hooks


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("relay_to_tir", "a callable IRModule -> IRModule (e.g. a tessera.transform.Pass)",
              "lowers the kind's partitions to PrimFuncs", RELAY_TO_TIR),
    FieldSpec("tir_to_runtime", "a callable (IRModule, Target) -> runtime module",
              "builds the kind's PrimFuncs instead of the default code generator", TIR_TO_RUNTIME),
    FieldSpec("relay_to_runtime", "a callable (Function) -> runtime module",
              "compiles a whole partition into its own runtime module", RELAY_TO_RUNTIME),
    FieldSpec("update_constants", "a callable (Function, symbol) -> {name: numpy array}",
              "the constants a RelayToRuntime module owns", UPDATE_CONSTANTS),
    FieldSpec("toolchain", "a callable (Target) -> Toolchain",
              "the C compiler and flags for the kind's code (default: the host C toolchain)"),
    FieldSpec("validate", "a callable (Target) -> None that raises TargetError",
              "rejects impossible attribute combinations when a target is built"),
    FieldSpec("codegen", "a callable (IRModule, Target) -> runtime module",
              "the default code generator for PrimFuncs of this kind"),
    FieldSpec("pattern_table", "a sequence of tessera.relay.pattern_table.PatternEntry",
              "composite patterns the accelerator takes"),
    FieldSpec("supported_ops", "a mapping of op name -> bool or a callable (Call) -> bool",
              "single operators the accelerator takes"),
    FieldSpec("bind_constants", "a bool",
              "constants go inside the kind's partitions (True) or stay arguments"),
    FieldSpec("supports_op", "a callable (Target, op) -> bool",
              "which operators a named piece of this kind can run (default: any with a TE compute)"),
)

FIELD_BY_NAME = {f.name: f for f in FIELDS}
FIELD_BY_HOOK = {f.hook: f for f in FIELDS if f.hook}


def check_field(name: str, value: object) -> str | None:
    """None when `value` fits field `name`, else what is wrong with it."""
    if name == "bind_constants":
        return None if isinstance(value, bool) else "not a bool"
    if name == "pattern_table":
        if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
            return "not a sequence"
        bad = [e for e in value if not isinstance(e, PatternEntry)]
        return f"entry {bad[0]!r} is not a PatternEntry" if bad else None
    if name == "supported_ops":
        if not isinstance(value, Mapping):
            return "not a mapping"
        bad = [k for k, v in value.items() if not isinstance(k, str) or not (isinstance(v, bool) or callable(v))]
        return f"entry {bad[0]!r} is not a name mapped to a bool or a callable" if bad else None
    return None if callable(value) else "not callable"
