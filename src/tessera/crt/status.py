"""Status codes of generated C functions, mirroring `TSStatus` in c_runtime_api.h.

Kernels, graph segments and AOT entry points return one of these (0 is
success); the executors turn a non-zero status into a `KernelFailure` whose
message says what went wrong. `c_name` is what generated C writes, so no
status is a bare number in either language.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    OK = 0
    KERNEL = -1
    ARG_COUNT = -2
    ARG_TYPE = -3
    ARG_SHAPE = -4
    NULL_POINTER = -5
    INDEX_OUT_OF_RANGE = -6
    DIVIDE_BY_ZERO = -7

    @property
    def c_name(self) -> str:
        return "TS_OK" if self is Status.OK else f"TS_ERROR_{self.name}"

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    Status.OK: "success",
    Status.KERNEL: "a kernel could not get its scratch memory",
    Status.ARG_COUNT: "wrong number of arguments",
    Status.ARG_TYPE: "an argument has the wrong dtype",
    Status.ARG_SHAPE: "an argument has the wrong shape",
    Status.NULL_POINTER: "a pool or tensor pointer is NULL",
    Status.INDEX_OUT_OF_RANGE: "index out of range",
    Status.DIVIDE_BY_ZERO: "integer division by zero",
}


def is_status(value: int) -> bool:
    return any(value == s.value for s in Status)


def describe(status: int) -> str:
    """What a returned status means, with its C name ("index out of range (TS_ERROR_...)")."""
    try:
        known = Status(status)
    except ValueError:
        return f"unknown status {status}"
    return f"{known.meaning} ({known.c_name})"
