"""Operator registry and the operators tessera knows.

Importing this package registers every operator (each module registers its
own); `REGISTRY.names()` lists them.
"""

from . import elemwise, elemwise_activation, reduce, transform  # noqa: F401  (registration)
from . import (  # noqa: F401  (registration)
    transform_fill, transform_gather, transform_pad, transform_resize, transform_scan, transform_scatter,
)
from .nn import conv, matmul, norm, pool, recurrent, softmax  # noqa: F401
from . import qnn, qnn_add_pool, qnn_nhwc, qnn_tflite  # noqa: F401
from .registry import REGISTRY, Compute, Op, OpPattern, register_op
from .schedule_context import ScheduleContext

__all__ = ["REGISTRY", "Compute", "Op", "OpPattern", "ScheduleContext", "register_op"]
