"""Schedule tuning: measure kernels' candidate schedules on this machine, and keep a log of them.

Kernels ask for their knobs through the ScheduleContext LowerTE gives them
(`tessera.op.schedule_context`); the log format lives with it
(`tessera.op.tuning_log`), since every build reads it. This package drives
whole builds to measure candidates: it sits above the backend, and only the
command line (`tessera tune`) and users call it.
"""

from ..op.schedule_context import Choice, OtherCpuWarning, ScheduleContext
from ..op.tuning_log import LOG_CONFIG_KEY, Record, TuningLog, Workload
from .tuner import Task, Tuned, extract_tasks, tune

__all__ = ["LOG_CONFIG_KEY", "Choice", "OtherCpuWarning", "Record", "ScheduleContext", "Task", "Tuned", "TuningLog",
           "Workload", "extract_tasks", "tune"]
