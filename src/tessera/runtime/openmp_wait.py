"""The wait policy of the host libraries' OpenMP threads, fixed before libgomp loads.

Host kernels run their parallel loops on GCC's OpenMP runtime, libgomp, which
reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded. With neither
set, a thread with nothing to do (a pool thread between loops, or the thread
that finished its share first at a loop's end) spins 300,000 times before it
sleeps: milliseconds. When another process keeps a core busy, a spinning
thread holds its core while its partner waits for a time slice on the busy
one, at every loop: DenseNet-121 at two threads took 5.3 s a run instead of
0.5 s at one thread (2-core AMD EPYC, AVX-512, second core busy).

A passive policy makes a waiting thread sleep at once, so a preempted partner
can move to the freed core; there DenseNet-121 at two threads ran in 0.07 s.
(A short spin, GOMP_SPINCOUNT=1000, about 10 us, still took 0.4 s.) Waking a
sleeping thread costs microseconds at the start of each parallel loop, which
is why small kernels stay on one thread (te/parallel.py, PARALLEL_MIN_WORK). So
before the first host library loads, `prepare_openmp` loads libgomp itself
with OMP_WAIT_POLICY=PASSIVE in the environment and restores the environment
afterwards (child processes see the user's). It changes nothing when the user
set OMP_WAIT_POLICY or GOMP_SPINCOUNT, or when a libgomp is already loaded (it
read its policy then): `OpenMPSetup` says which happened.
"""

from __future__ import annotations

import ctypes
import enum
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

LIBGOMP = "libgomp.so.1"  # the soname host libraries built by gcc -fopenmp depend on
WAIT_POLICY = "PASSIVE"  # what tessera sets when the user has not
USER_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


class WaitPolicy(enum.Enum):
    """Who chose the OpenMP pool's wait policy."""

    TESSERA = "tessera"  # libgomp loaded by prepare_openmp with OMP_WAIT_POLICY=WAIT_POLICY
    USER = "user"  # the environment sets OMP_WAIT_POLICY or GOMP_SPINCOUNT: left alone
    ALREADY_LOADED = "already loaded"  # another library loaded libgomp first: its policy stands
    NO_LIBGOMP = "no libgomp"  # not Linux, or libgomp is not installed: nothing to set


@dataclass(frozen=True, slots=True)
class OpenMPSetup:
    policy: WaitPolicy
    detail: str  # the user's setting, or the library that was loaded


def libgomp_loaded() -> str | None:
    """The path of a libgomp.so.1 this process has mapped (None: none, or no /proc to tell)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1]
        if Path(path).name.startswith(LIBGOMP):
            return path
    return None


_lock = threading.Lock()
_setup: OpenMPSetup | None = None
_handle: ctypes.CDLL | None = None  # kept: libgomp must stay loaded once its policy is read


def prepare_openmp() -> OpenMPSetup:
    """Fix the OpenMP wait policy for this process, once; call before loading a host library."""
    global _setup
    with _lock:
        if _setup is None:
            _setup = _decide()
        return _setup


def _decide() -> OpenMPSetup:
    global _handle
    user = [f"{k}={os.environ[k]}" for k in USER_VARIABLES if k in os.environ]
    if user:
        return OpenMPSetup(WaitPolicy.USER, ", ".join(user))
    if not sys.platform.startswith("linux"):
        return OpenMPSetup(WaitPolicy.NO_LIBGOMP, sys.platform)
    loaded = libgomp_loaded()
    if loaded is not None:
        return OpenMPSetup(WaitPolicy.ALREADY_LOADED, loaded)
    os.environ["OMP_WAIT_POLICY"] = WAIT_POLICY
    try:
        _handle = ctypes.CDLL(LIBGOMP)
    except OSError as e:
        return OpenMPSetup(WaitPolicy.NO_LIBGOMP, str(e))
    finally:
        del os.environ["OMP_WAIT_POLICY"]
    return OpenMPSetup(WaitPolicy.TESSERA, libgomp_loaded() or LIBGOMP)
