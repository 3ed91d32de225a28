"""Schedule tuning: knobs that kernels consult, and a log of measured choices."""

from .knobs import LOG_CONFIG_KEY, Choice, Workload, choose, collect, forced
from .log import Record, TuningLog

__all__ = ["LOG_CONFIG_KEY", "Choice", "Record", "TuningLog", "Workload", "choose", "collect", "forced"]
