"""Where a target kind was registered: built in, a module, or a package's entry point.

`tessera targets` shows it, and a clash of two kinds under one name names
both registrations. The registration site (module and line) also tells a
re-run of the same registration (a notebook re-importing a module) from a
different kind that happens to take a used name.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

# Set while an entry point of the `tessera.targets` group is being loaded, so the
# kinds it registers remember the distribution they came from.
_LOADING: contextvars.ContextVar[str | None] = contextvars.ContextVar("tessera_target_loading", default=None)


@dataclass(frozen=True)
class Origin:
    module: str  # the module whose code called TargetKind.register
    line: int
    entry_point: str | None = None  # "distribution D 1.0, entry point 'E'" when loaded through one

    @property
    def site(self) -> tuple[str, int]:
        return (self.module, self.line)

    @property
    def built_in(self) -> bool:
        return self.module == "tessera" or self.module.startswith("tessera.")

    def __str__(self) -> str:
        if self.entry_point:
            return f"{self.entry_point} (module {self.module}, line {self.line})"
        if self.built_in:
            return f"built in ({self.module})"
        return f"module {self.module} (line {self.line})"


def caller_origin(frame: FrameType) -> Origin:
    return Origin(str(frame.f_globals.get("__name__", "?")), frame.f_lineno, _LOADING.get())


@contextlib.contextmanager
def loading_entry_point(description: str) -> Iterator[None]:
    token = _LOADING.set(description)
    try:
        yield
    finally:
        _LOADING.reset(token)
