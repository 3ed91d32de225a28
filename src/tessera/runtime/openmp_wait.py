"""The wait policy of the host libraries' OpenMP threads, fixed before libgomp loads.

Host kernels run their parallel loops on GCC's OpenMP runtime, libgomp, which
reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded. A thread
with nothing to do (a pool thread between loops, or the thread that finished
its share first at a loop's end) spins GOMP_SPINCOUNT times before it sleeps
on a futex; waking a sleeping thread costs microseconds at every loop.

tessera sets a short spin, SPIN_COUNT, before the first host library loads.
Measured on a 2-core AMD EPYC (Zen 4, AVX-512), where one spin (a `pause`)
takes about 55 ns, so SPIN_COUNT is about 0.2 ms, at two threads with
PARALLEL_MIN_WORK 1 << 16 (te/parallel.py), quiet machine:

    spin count            0 (passive)   300     1000    3000    10000
    ic_resnet8, ms        0.41          0.30    0.19    0.19    0.19
    efficientnet_block    0.55          0.47    0.35    0.35    0.33

(one thread: 0.28 and 0.53 ms; onnxruntime at two threads 0.13 and 0.24).
A sleeping pool makes every parallel loop pay a wake-up, so the second
thread gained nothing on models whose runs take under a few milliseconds.

The price is paid when another process keeps a core busy: a spinning thread
holds its core while its partner waits for a time slice. With one core busy,
DenseNet-121 at two threads took 110 ms a run with SPIN_COUNT and 157 ms at
10,000 spins, against 63 ms at one thread and 65 ms at two with a passive
pool (libgomp's default, 300,000 spins, took 5.3 s a run in an earlier
measurement under a heavier load). So graph runs choose their thread
count from measured run times (runtime/thread_choice.py): on a busy machine
they run on one thread.

`prepare_openmp` loads libgomp itself with GOMP_SPINCOUNT=SPIN_COUNT in the
environment and restores the environment afterwards (child processes see
the user's). It changes nothing when the user set OMP_WAIT_POLICY or
GOMP_SPINCOUNT, or when a libgomp is already loaded (it read its policy
then): `OpenMPSetup` says which happened.
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
SPIN_COUNT = 3000  # GOMP_SPINCOUNT tessera sets when the user has not (see above)
USER_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


class WaitPolicy(enum.Enum):
    """Who chose the OpenMP pool's wait policy."""

    TESSERA = "tessera"  # libgomp loaded by prepare_openmp with GOMP_SPINCOUNT=SPIN_COUNT
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
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    try:
        _handle = ctypes.CDLL(LIBGOMP)
    except OSError as e:
        return OpenMPSetup(WaitPolicy.NO_LIBGOMP, str(e))
    finally:
        del os.environ["GOMP_SPINCOUNT"]
    return OpenMPSetup(WaitPolicy.TESSERA, libgomp_loaded() or LIBGOMP)
