"""Target kinds from installed packages: the `tessera.targets` entry point group.

A distribution declares, in its pyproject.toml,

    [project.entry-points."tessera.targets"]
    mykind = "my_package.target"            # a module: importing it registers kinds
    other = "my_package.target:register"    # or a callable, called with no arguments

Entry points are loaded at two moments: when the `tessera` command starts,
and when a kind or alias name is not found (so `Target("mykind")` works in
a plain Python session). Each loads once per process; one that fails is a
`TargetError` naming the distribution and the entry point.

tessera's own kinds above the target layer (`c` next to its code generator,
the library targets in `contrib`) are listed in `BUILTIN_MODULES` and
imported the first time the kind or alias registry is read, so a plain
`import tessera` stays light (the runtime only) and `Target("c")` still
works right after it.
"""

from __future__ import annotations

import importlib
import threading
from importlib.metadata import EntryPoint, entry_points

from .errors import TargetError
from .kind import KINDS
from .origin import loading_entry_point

GROUP = "tessera.targets"

# Named, not imported: these packages sit above `target` in the layering
# (docs/architecture.md), and importing them pulls in the whole compiler.
BUILTIN_MODULES = ("tessera.codegen.c_target", "tessera.contrib.blas", "tessera.contrib.onnxruntime")
_builtins_loaded = False
# Set while this thread imports the built-ins: their own registrations read the registries again.
# No lock of ours: a second thread's first look-up imports the same modules and Python's per-module
# import locks make it wait for the first thread's imports (a lock here could deadlock against them).
_importing = threading.local()


def load_builtin_kinds() -> None:
    """Import the modules that register tessera's own kinds and aliases, once (thread-safe)."""
    global _builtins_loaded
    if _builtins_loaded or getattr(_importing, "active", False):
        return
    _importing.active = True
    try:
        for name in BUILTIN_MODULES:
            importlib.import_module(name)
        _builtins_loaded = True  # only now: a failure is reported again by the next look-up
    finally:
        _importing.active = False


def _distribution(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else "(unknown distribution)"


def load_entry_point(ep: EntryPoint) -> None:
    where = f"distribution {_distribution(ep)}, entry point {ep.name!r}"
    try:
        with loading_entry_point(where):
            loaded = ep.load()
            if ep.attr is not None:
                if not callable(loaded):
                    raise TypeError(f"{ep.value} is not callable")
                loaded()
    except TargetError as err:
        raise TargetError(f"loading target kinds from {where} ({ep.value}) in group {GROUP!r}: {err}") from err
    except Exception as err:
        raise TargetError(f"loading target kinds from {where} ({ep.value}) in group {GROUP!r} failed: "
                          f"{type(err).__name__}: {err}") from err


def load_plugins() -> None:
    """Load tessera's own kinds and every `tessera.targets` entry point not loaded yet."""
    load_builtin_kinds()
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        key = (_distribution(ep), ep.name)
        if key in KINDS.loaded_entry_points:
            continue
        KINDS.loaded_entry_points.add(key)  # before loading: a failure is reported once, not on every look-up
        load_entry_point(ep)


def load_module(name: str) -> None:
    """Import `name` for the kinds it registers (`tessera ... --load NAME`)."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
            raise TargetError(f"--load {name}: no module named {err.name!r} on the Python path "
                              "(install the package or add its folder to PYTHONPATH)") from err
        raise TargetError(f"--load {name}: importing it failed: {type(err).__name__}: {err}") from err
    except TargetError as err:
        raise TargetError(f"--load {name}: {err}") from err
    except Exception as err:
        raise TargetError(f"--load {name}: importing it failed: {type(err).__name__}: {err}") from err
