"""Pass infrastructure: Pass, Sequential, PassContext and instruments.

A pass is an object with a name, an opt level and `transform(mod, ctx)`.
`PassContext` carries the options of one compilation (opt level, config,
disabled passes, instruments); it is passed explicitly, and `with ctx:` also
makes it the default for code that is not handed one.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Optional, TextIO

from ..errors import TesseraError, VerificationError
from ..relay.expr import Function
from ..relay.module import IRModule
from ..relay.verify import verify_module


class PassInstrument:
    """Hooks around each pass; subclasses override what they need."""

    def enter_pass_ctx(self) -> None: ...

    def exit_pass_ctx(self) -> None: ...

    def run_before_pass(self, mod: IRModule, pass_: "Pass") -> None: ...

    def run_after_pass(self, mod: IRModule, pass_: "Pass") -> None: ...


@dataclass
class PassTiming:
    """One pass run: its name, how deep it ran (a Sequential's passes one below it) and its wall time."""

    name: str
    depth: int
    seconds: float = 0.0


class PassTimingInstrument(PassInstrument):
    """Records wall time per pass; `summary()` renders a table.

    `timings` lists (name, seconds) in the order passes finished; `records`
    lists PassTiming in the order they started, with their nesting depth.
    """

    def __init__(self) -> None:
        self.timings: list[tuple[str, float]] = []
        self.records: list[PassTiming] = []
        self._start: list[tuple[float, PassTiming]] = []

    def run_before_pass(self, mod: IRModule, pass_: "Pass") -> None:
        record = PassTiming(pass_.name, len(self._start))
        self.records.append(record)
        self._start.append((time.perf_counter(), record))

    def run_after_pass(self, mod: IRModule, pass_: "Pass") -> None:
        start, record = self._start.pop()
        record.seconds = time.perf_counter() - start
        self.timings.append((pass_.name, record.seconds))

    def summary(self) -> str:
        """A table in run order; nested passes are indented under their Sequential, and the
        percentage is of the time of the outermost passes (so nothing counts twice)."""
        total = sum(r.seconds for r in self.records if r.depth == 0) or 1e-12
        lines = [f"{'pass':<40} {'ms':>10} {'%':>6}"]
        for r in self.records:
            name = "  " * r.depth + r.name
            lines.append(f"{name:<40} {r.seconds * 1e3:>10.2f} {100 * r.seconds / total:>6.1f}")
        return "\n".join(lines)


class PrintIRInstrument(PassInstrument):
    """Prints the module after the named passes (all when `passes` is empty)."""

    def __init__(self, passes: Iterable[str] = (), stream: TextIO | None = None) -> None:
        self.passes = set(passes)
        self.stream = stream or sys.stdout

    def run_after_pass(self, mod: IRModule, pass_: "Pass") -> None:
        if not self.passes or pass_.name in self.passes:
            print(f"// after {pass_.name}\n{mod}\n", file=self.stream)


VERIFY_CONFIG = "verify"  # PassContext.config key: verify the IR after every pass


@dataclass
class PassContext:
    """Options of one compilation.

    `config={"verify": True}` runs the Relay and TIR verifiers after every
    pass. Without the key, a context takes the setting of the context that
    is current when it is created, so a test suite (or a user) can turn
    verification on once, around everything.
    """

    opt_level: int = 2
    config: Mapping[str, object] = field(default_factory=dict)
    disabled_pass: Sequence[str] = ()
    instruments: Sequence[PassInstrument] = ()
    verify: bool = field(init=False, default=False)  # read from config, or inherited

    _stack: ClassVar[list["PassContext"]] = []

    def __post_init__(self) -> None:
        setting = self.config.get(VERIFY_CONFIG)
        if setting is None:
            setting = PassContext._stack[-1].verify if PassContext._stack else False
        if not isinstance(setting, bool):
            raise TesseraError(f"PassContext config {VERIFY_CONFIG!r}: got {setting!r}, expected True or False")
        self.verify = setting

    def __enter__(self) -> "PassContext":
        PassContext._stack.append(self)
        for inst in self.instruments:
            inst.enter_pass_ctx()
        return self

    def __exit__(self, *exc: object) -> None:
        for inst in self.instruments:
            inst.exit_pass_ctx()
        PassContext._stack.pop()

    @classmethod
    def current(cls) -> "PassContext":
        return cls._stack[-1] if cls._stack else cls()

    def made_current(self) -> contextlib.AbstractContextManager:
        """Enter this context unless it is already the current one (code that
        reads `PassContext.current()`, like schedule knobs, then sees it)."""
        return contextlib.nullcontext(self) if PassContext.current() is self else self

    def is_enabled(self, p: "Pass") -> bool:
        return p.opt_level <= self.opt_level and p.name not in self.disabled_pass


class Pass:
    """A module-to-module transformation."""

    name: str = "Pass"
    opt_level: int = 0
    # whether the verifier checks this pass's output (a Sequential's passes check their own)
    verified: ClassVar[bool] = True
    # whether every expression of the output has a checked type (the verifier then requires it)
    types_every_node: ClassVar[bool] = False

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError

    def __call__(self, mod: IRModule, ctx: Optional[PassContext] = None) -> IRModule:
        ctx = ctx or PassContext.current()
        if not ctx.is_enabled(self):
            return mod
        for inst in ctx.instruments:
            inst.run_before_pass(mod, self)
        result = self.transform(mod, ctx)
        for inst in ctx.instruments:
            inst.run_after_pass(result, self)
        if ctx.verify and self.verified:  # after the instruments: timings leave it out, printed IR shows
            _verify_after(self, mod, result)
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class FunctionPass(Pass):
    """Applies `transform_function` to every Relay function of the module."""

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        raise NotImplementedError

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        result = mod
        for gv, func in mod.items():
            if isinstance(func, Function):
                new = self.transform_function(func, mod, ctx)
                if new is not func:
                    result = result.with_function(gv, new)
        return result


def _verify_after(pass_: Pass, before: IRModule, after: IRModule) -> None:
    """Verify a pass's output; on failure, tell a broken pass from broken input."""
    try:
        verify_module(after, require_types=pass_.types_every_node)
    except VerificationError as err:
        try:
            verify_module(before)
        except VerificationError as earlier:
            raise VerificationError(f"the input of pass {pass_.name} is already invalid: {earlier}") from None
        raise VerificationError(f"pass {pass_.name} produced invalid IR: {err}") from None


class Sequential(Pass):
    verified = False

    def __init__(self, passes: Sequence[Pass], name: str = "Sequential", opt_level: int = 0) -> None:
        self.passes = tuple(passes)
        self.name = name
        self.opt_level = opt_level

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for p in self.passes:
            mod = p(mod, ctx)
        return mod

    def __repr__(self) -> str:
        return f"Sequential({', '.join(p.name for p in self.passes)})"
