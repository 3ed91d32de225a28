"""Schedule tuning: knobs that kernels consult, a log of measured choices, and the tuner."""

from .knobs import LOG_CONFIG_KEY, Choice, Workload, choose, collect, current_target, forced, lowering_for
from .log import Record, TuningLog

_TUNER_NAMES = ("Task", "Tuned", "extract_tasks", "tune")

__all__ = ["LOG_CONFIG_KEY", "Choice", "Record", "Task", "Tuned", "TuningLog", "Workload", "choose", "collect",
           "current_target", "extract_tasks", "forced", "lowering_for", "tune"]


def __getattr__(name: str) -> object:
    # the tuner drives whole builds, and the build's lowering consults the knobs
    # above: importing it lazily keeps knobs importable from inside the build
    if name in _TUNER_NAMES:
        from . import tuner

        return getattr(tuner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
