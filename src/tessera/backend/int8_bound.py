"""The int8 activation bound of a quantised model: what a planned pool is judged against.

Issue 15 measures an int8 model's planned RAM against the largest layer's
int8 activations: for each integer operator of the optimised graph, the int8
tensors it reads (not constants: weights live in flash) plus the int8 tensor
it writes; the bound is the largest such sum. A pool cannot be smaller than
what one layer reads and writes at once (unless it works in place). The
graph's own input and output are the caller's buffers; the int8 tensor that
quantises the input is not, so it counts.

It lives in the backend, beside the memory planner whose result it judges,
so `tessera compile --memory-report` can print it (`tessera.testing.int8_bound`
re-exports it for the benchmarks and tests).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .build_module import bind_params, optimize
from ..relay.expr import Call, Constant
from ..relay.module import IRModule
from ..relay.ty import TensorType
from ..relay.visitor import iter_calls
from ..transform.pass_infra import PassContext

INT8_DTYPES = ("int8", "uint8")


def _int8_bytes(ty: object) -> int:
    return math.prod(ty.shape) if isinstance(ty, TensorType) and ty.dtype in INT8_DTYPES else 0


def layer_int8_bytes(mod: IRModule, params: Mapping[str, np.ndarray] | None = None) -> list[tuple[str, int]]:
    """(operator, int8 bytes read and written) for every call that writes an int8 tensor, in the
    optimised graph (the integer kernels QuantizeToInteger makes)."""
    if params:
        mod = mod.with_function("main", bind_params(mod.main, params))
    mod = optimize(mod, PassContext())
    layers = []
    for call in iter_calls(mod.main.body):
        out = _int8_bytes(call.checked_type)
        if not out:
            continue
        reads = sum(_int8_bytes(a.checked_type) for a in call.args if not isinstance(a, Constant))
        layers.append((getattr(call.op, "name", str(call.op)), reads + out))
    return layers


def int8_activation_bound(mod: IRModule, params: Mapping[str, np.ndarray] | None = None) -> int:
    """The largest layer's int8 input(s) + output in bytes (0 for a model without int8 layers)."""
    return max((size for _, size in layer_int8_bytes(mod, params)), default=0)
