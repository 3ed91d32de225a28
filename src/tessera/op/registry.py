"""The operator registry: `register_op` and the typed hooks an operator supplies.

The `Op` type and the registry itself live with the graph IR
(`tessera.relay.op`), which calls, patterns and the printer need; they are
re-exported here, where operators are defined. Each op module registers its
own operators at import (see `tessera.op`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Union

from .. import te
from ..relay.op import REGISTRY, Op, OpPattern, OpRegistry, Reference, TypeRelation, Validate, attrs_as_dict
from .schedule_context import ScheduleContext

__all__ = ["REGISTRY", "Compute", "Op", "OpPattern", "OpRegistry", "Reference", "TypeRelation", "Validate",
           "attrs_as_dict", "register_op"]

# An op's lowering to loops: (input tensors, attrs, output type, schedule context) -> its
# output tensor(s). The context says which target the kernel is for and answers schedule
# knobs (`sched.choose`); most computes ignore it. Attrs and output type are each op's own
# (a dataclass; a TensorType, or a TupleType for ops with several outputs), hence Any.
Compute = Callable[[list[te.Tensor], Any, Any, ScheduleContext], Union[te.Tensor, tuple[te.Tensor, ...]]]


def register_op(
    name: str,
    *,
    type_rel: TypeRelation,
    reference: Reference,
    pattern: OpPattern,
    compute: Optional[Compute] = None,
    attrs: Optional[type] = None,
    num_inputs: Optional[int] = None,
    doc: str = "",
    foldable: bool = True,
    validate: Optional[Validate] = None,
) -> Op:
    return REGISTRY.register(
        Op(name, type_rel, reference, pattern, compute, attrs, num_inputs, doc, foldable, validate)
    )
