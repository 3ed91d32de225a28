"""Helpers shared by converters."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....relay.expr import Constant, Expr
from ..importer import ImportContext, Node


def scalar(value: float | int, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def ints(values: Sequence[int] | np.ndarray) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(values).reshape(-1))


def auto_pad(node: Node, in_spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> tuple[int, ...]:
    """ONNX padding (begins then ends) from `pads` or `auto_pad`."""
    d = len(kernel)
    mode = node.attr("auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        pads = ints(node.attr("pads", [0] * (2 * d)))
        if len(pads) != 2 * d:
            raise node.error(f"pads must have {2 * d} values, got {list(pads)}")
        return pads
    if mode == "VALID":
        return (0,) * (2 * d)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.error(f"auto_pad={mode!r} is not valid; expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    begins, ends = [], []
    for k in range(d):
        out = -(-in_spatial[k] // strides[k])
        total = max(0, (out - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - in_spatial[k])
        small, large = total // 2, total - total // 2
        if mode == "SAME_UPPER":
            begins.append(small)
            ends.append(large)
        else:
            begins.append(large)
            ends.append(small)
    return tuple(begins + ends)


def axes_input_or_attr(node: Node, ctx: ImportContext, input_index: int, what: str = "axes") -> tuple[int, ...] | None:
    """Axes given as an attribute (older opsets) or as an input (newer ones)."""
    given = node.optional_input(input_index)
    if given is not None:
        return ints(ctx.constant(given, f"input {what}"))
    if what in node.attrs:
        return ints(node.attrs[what])
    return None


def expr_dtype(ctx: ImportContext, e: Expr) -> str:
    return ctx.dtype_of(e)
