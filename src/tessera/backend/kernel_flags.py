"""A per-kernel C optimisation knob for Cortex-M, picked by measurement.

The Cortex-M toolchain builds every kernel at `-O3`. Which level is best
differs per kernel: `-O3`'s unrolling and vectorisation pay off in long
int8 reductions, cost instructions around short loops, and `-funroll-loops`
helps some inner loops further. Each kernel built for a Cortex-M core
therefore asks its ScheduleContext for a `kernel_flags` configuration;
`tessera tune --board` counts the instructions of every candidate under QEMU
and the log carries the winner to later builds.

The default (0) adds nothing, so an untuned build's C text is unchanged; any
other choice becomes a gcc `optimize` attribute on that one function
(`codegen.c_source.OPTIMIZE_ATTR`).
"""

from __future__ import annotations

import hashlib

from ..errors import CompileError
from ..op.schedule_context import ScheduleContext
from ..relay.expr import Function
from ..relay.printer import expr_str

OP = "kernel_flags"
DEFAULT = 0
# choice -> gcc optimize options for the kernel's function (on top of the toolchain's -O3)
FLAG_CHOICES: dict[int, tuple[str, ...]] = {
    0: (),
    1: ("O2",),
    2: ("O3", "unroll-loops"),
    3: ("Os",),
}


def tunes_flags(sched: ScheduleContext) -> bool:
    """Only Cortex-M kernels: on the host a build's flags are the user's, and timing is noisy anyway."""
    return str(sched.target.get("mcpu") or "").startswith("cortex-m")


def kernel_flags(func: Function, hint: str, sched: ScheduleContext) -> tuple[str, ...]:
    """The gcc optimize options the kernel of `func` (named after `hint`, its operators) is built with
    (empty: the toolchain's)."""
    if not tunes_flags(sched):
        return ()
    # the workload is the fused function itself; its printed text names the kernel exactly (shapes,
    # attributes, scalar constants), a digest keeps the log short
    digest = hashlib.sha256(expr_str(func).encode()).hexdigest()[:16]
    description = {"kernel": hint, "digest": digest}
    config = sched.choose(OP, description, [{"flags": k} for k in FLAG_CHOICES], {"flags": DEFAULT})
    choice = config.get("flags", DEFAULT)
    if choice not in FLAG_CHOICES:  # logs only offer listed choices (ScheduleContext.choose); a forced one may not
        raise CompileError(f"tuning log: kernel {hint!r} has kernel_flags {{'flags': {choice!r}}}; "
                           f"valid choices are {sorted(FLAG_CHOICES)}")
    return FLAG_CHOICES[choice]
