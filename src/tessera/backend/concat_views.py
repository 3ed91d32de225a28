"""Concatenations whose parts are computed in place: the memory plan's views.

A kernel that only concatenates its parameters (LowerTE marks it with
`CONCAT_ATTR`) along an axis with nothing but extents of 1 before it (the
channels of one NCHW image, say) copies each part into one contiguous byte
range of its result. When every part is the only result of another kernel,
that kernel can write it there directly and the copy has nothing left to
do: the plan places each part at its byte offset inside the
concatenation's buffer (`Tensor.shares` and `Tensor.view_offset`) and marks
the step a view (`Step.view`), which both executors skip. SqueezeNet's
fire modules, Inception's branches and DenseNet's growing feature maps (a
chain: each concatenation is a part of the next) all have them; their
copies took 1-2.7% of those networks' time at one thread (AMD EPYC Zen 4).

A part qualifies when it is an intermediate result, not a model result
(the graph executor hands those to the caller in arrays of their own), the
only result of its kernel, read once by this concatenation and placed by
no other, and made on the same piece or target kind as the concatenation
(a named compilation's pools are per piece). The result must be an
intermediate too, and each part's offset a multiple of the plan's
alignment, so that every tensor still starts where the planner would place
one (kernels for Cortex-M or with SIMD loads may count on it; every part of
SqueezeNet, Inception and DenseNet-121 starts on 16 bytes). Anything else
keeps the copy. docs/concat-views-design.md has the design and its open
questions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..relay.module import IRModule
from ..target import Target
from ..tir.stmt import PrimFunc
from .lower_te import CONCAT_ATTR
from .program import Program, Role, Step, Tensor
from .target_hooks import DEVICE_ATTR, TARGET_ATTR


@dataclass(frozen=True)
class ConcatView:
    """A concatenation computed in place: `parts` (in order) live at `offsets` (bytes) in its result."""

    step: Step
    parts: tuple[Tensor, ...]
    offsets: tuple[int, ...]

    @property
    def result(self) -> Tensor:
        return self.step.outputs[0]


def step_kind(program: Program, step: Step, host_kind: str) -> str:
    """Where a step runs: its kernel's named piece in a named compilation, else its target kind."""
    func = program.kernels.get(step.kernel)
    attrs = func.attrs if func is not None else {}
    piece, target = attrs.get(DEVICE_ATTR), attrs.get(TARGET_ATTR)
    if isinstance(piece, str) and piece:
        return piece
    if isinstance(target, Target):
        return target.kind.name
    return host_kind


def concat_views(program: Program, host_kind: str = "c", alignment: int = 16) -> list[ConcatView]:
    """The concatenations of `program` whose parts can be computed in their result, in step order
    (each part at a multiple of `alignment` bytes)."""
    results = {id(t) for t in program.results}
    producers = {id(t): s for s in program.steps for t in s.outputs}
    claimed: set[int] = set()
    views = []
    for s in program.steps:
        view = _view(program, s, results, producers, claimed, host_kind, alignment)
        if view is not None:
            views.append(view)
            claimed.update(id(t) for t in view.parts)
    return views


def _view(program: Program, s: Step, results: set[int], producers: dict[int, Step], claimed: set[int],
          host_kind: str, alignment: int) -> ConcatView | None:
    func = program.kernels.get(s.kernel)
    parts_attr = func.attrs.get(CONCAT_ATTR) if isinstance(func, PrimFunc) else None
    if not isinstance(parts_attr, tuple) or s.num_outputs != 1 or s.scratch:
        return None
    axis, order = parts_attr
    result = s.outputs[0]
    shape = result.type.shape
    axis = axis + len(shape) if axis < 0 else axis
    if (result.role is not Role.INTERMEDIATE or id(result) in results or math.prod(shape[:axis]) != 1
            or sorted(order) != list(range(len(s.inputs)))):
        return None
    parts = tuple(s.inputs[k] for k in order)
    kind = step_kind(program, s, host_kind)
    if not all(_placeable(program, t, s, results, producers, claimed, kind, host_kind) for t in parts):
        return None
    offsets = tuple(sum(t.nbytes for t in parts[:k]) for k in range(len(parts)))
    if offsets[-1] + parts[-1].nbytes != result.nbytes or any(o % alignment for o in offsets):
        return None  # (the type relation makes the sizes add up)
    return ConcatView(s, parts, offsets)


def _placeable(program: Program, t: Tensor, concat: Step, results: set[int], producers: dict[int, Step],
               claimed: set[int], kind: str, host_kind: str) -> bool:
    producer = producers.get(id(t))
    return (producer is not None and t.role is Role.INTERMEDIATE and id(t) not in results
            and id(t) not in claimed and t.nbytes > 0 and t.type.dtype == concat.outputs[0].type.dtype
            and len(producer.outputs) == 1 and isinstance(program.kernels.get(producer.kernel), PrimFunc)
            and sum(a is t for a in concat.args) == 1 and step_kind(program, producer, host_kind) == kind)


def place(views: Sequence[ConcatView]) -> None:
    """Put each view's parts in its result and mark its step (the plan resets both before each try)."""
    for v in views:
        for t, offset in zip(v.parts, v.offsets):
            t.shares, t.view_offset = v.result, offset
        v.step.view = True


def view_only_kernels(steps: Sequence[Step]) -> frozenset[str]:
    """The kernels every call of which is a view: nothing calls them, so no C is made for them."""
    called = {s.kernel for s in steps if not s.view}
    return frozenset(s.kernel for s in steps if s.view and s.kernel not in called)


def without_kernels(mod: IRModule, names: frozenset[str]) -> IRModule:
    """`mod` without the PrimFuncs named `names` (for code generation; `main` may still name them)."""
    for gv, func in list(mod.items()):
        if isinstance(func, PrimFunc) and gv.name_hint in names:
            mod = mod.without(gv)
    return mod


__all__: Sequence[str] = ("ConcatView", "concat_views", "place", "step_kind", "view_only_kernels", "without_kernels")
