"""How much scratch a model's kernels ask for: tests bounding the workspace of a schedule."""

from __future__ import annotations

import math

import onnx

from ..backend.build_module import as_target, lower_to_tir
from ..backend.lift_workspace import workspace_params
from ..frontend import from_onnx
from ..tir import stmt as S
from ..transform import PassContext


def largest_scratch(model: onnx.ModelProto, target: str = "c",
                    ctx: PassContext | None = None) -> tuple[int, list[tuple[str, tuple[int, ...]]]]:
    """The largest float32 scratch one kernel asks for, in bytes, and that kernel's scratch buffers
    (compiled to loops only: no C compiler runs; `ctx`: the passes' context, a default one if None)."""
    mod, params = from_onnx(model)
    lowered = lower_to_tir(mod, as_target(target), params, ctx or PassContext(), lambda *a, **k: None, "scratch")
    best: tuple[int, list[tuple[str, tuple[int, ...]]]] = (0, [])
    for func in lowered.mod.functions.values():
        if isinstance(func, S.PrimFunc):
            buffers = workspace_params(func)
            size = sum(math.prod(b.shape) * 4 for b in buffers)
            best = max(best, (size, [(b.name, tuple(b.shape)) for b in buffers]))
    return best
