"""Targets: kinds with typed attributes and hooks, composite targets,
aliases, named sub-targets and toolchains."""

from . import builtin  # noqa: F401  (registers the built-in kinds)
from .errors import TargetError
from .hooks import RELAY_TO_RUNTIME, RELAY_TO_TIR, TIR_TO_RUNTIME, UPDATE_CONSTANTS
from .kind import KINDS, AttrOption, OptionType, TargetKind
from .named import CompilationConfig, parse_named_targets
from .tags import TAGS, register_tag
from .target import Target
from .toolchain import Toolchain

__all__ = [
    "KINDS", "RELAY_TO_RUNTIME", "RELAY_TO_TIR", "TAGS", "TIR_TO_RUNTIME", "UPDATE_CONSTANTS", "AttrOption",
    "CompilationConfig", "OptionType", "Target", "TargetError", "TargetKind", "Toolchain",
    "parse_named_targets", "register_tag",
]
