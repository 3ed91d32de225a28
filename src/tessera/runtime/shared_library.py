"""A loaded shared object and its C functions, through ctypes.

Kept apart from the modules that build libraries (`module.py`): loading a
file needs nothing of the compiler or its toolchains.
"""

from __future__ import annotations

import ctypes
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import RuntimeExecutionError
from .openmp_wait import prepare_openmp


@runtime_checkable
class CFunction(Protocol):
    """A C function of a loaded library, as ctypes gives it: what tessera sets and calls.

    (ctypes' own class for these is private.) `isinstance(f, CFunction)`
    tells it from a Python callable, such as an external module's function.
    """

    argtypes: Sequence[type] | None
    restype: type | None

    def __call__(self, *args: Any) -> Any: ...  # what it returns depends on `restype`


class SharedLibrary:
    """A loaded shared object; `kernel(name)` returns a C function pointer."""

    def __init__(self, path: Path, owner_dir: tempfile.TemporaryDirectory | None = None) -> None:
        # An absolute path: given a bare name ("model.so"), dlopen would search the
        # system library path instead of the current folder, and could load a system library.
        self.path = Path(path).absolute()
        prepare_openmp()  # libgomp reads its wait policy when it loads, which may be now
        self._lib = ctypes.CDLL(str(self.path))
        self._owner = owner_dir
        if owner_dir is not None:
            weakref.finalize(self, owner_dir.cleanup)

    def kernel(self, name: str) -> CFunction:
        try:
            fn = getattr(self._lib, name)
        except AttributeError:
            raise RuntimeExecutionError(f"kernel {name!r} not found in {self.path.name}") from None
        fn.restype = ctypes.c_int32
        return fn

    def symbol_address(self, name: str) -> int:
        return ctypes.cast(getattr(self._lib, name), ctypes.c_void_p).value or 0

    def has_symbol(self, name: str) -> bool:
        return hasattr(self._lib, name)

    def check_cpu(self) -> None:
        """Refuse to run code built for instructions this CPU lacks (it would die of SIGILL)."""
        if not self.has_symbol("TSMissingCpuFeature"):
            return  # built before the check existed, or for a target without one
        probe = self._lib.TSMissingCpuFeature
        probe.restype = ctypes.c_char_p
        missing = probe()
        if missing:
            raise RuntimeExecutionError(
                f"{self.path.name} was compiled for CPUs with {missing.decode()}, which this CPU lacks; "
                "rebuild it for this machine (target `c`, i.e. -march=native) or a lower ISA level "
                "(e.g. `c -mcpu=x86-64-v3` for AVX2, `c -mcpu=x86-64-v2` for SSE4.2)"
            )
