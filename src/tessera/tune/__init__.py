"""Schedule tuning: knobs that kernels consult, a log of measured choices, and the tuner."""

from .knobs import LOG_CONFIG_KEY, Choice, Workload, choose, collect, forced
from .log import Record, TuningLog
from .tuner import Task, Tuned, extract_tasks, tune

__all__ = ["LOG_CONFIG_KEY", "Choice", "Record", "Task", "Tuned", "TuningLog", "Workload", "choose", "collect",
           "extract_tasks", "forced", "tune"]
