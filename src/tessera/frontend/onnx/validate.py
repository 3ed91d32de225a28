"""Checks a model must pass before import: what onnxruntime refuses to load.

* Every value is defined once (ONNX graphs are in static single assignment
  form): a graph input, an initializer or a node output may not reuse a name
  already defined. Older exporters list initializers among the graph inputs
  too; that pair is one definition.
* Graph outputs have distinct names: executors address outputs by name, and
  the AOT interface makes one struct field of each.
* Each imported opset is one the converters know. A newer opset may change
  an operator's meaning; tessera refuses rather than guess that it did not.
  Domains tessera has no converters for are not checked: their nodes are
  unsupported operators anyway.
* Operand values known at compile time keep each operator's contract
  (`Op.validate`: gather indices in range, integer divisors not zero), so a
  model that could only fail at run time is refused when it is compiled.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from ...errors import ConversionError, UnsupportedOperatorError
from ...op.registry import Op
from ...relay.expr import Call, Constant, Expr, Tuple, TupleGetItem
from ...relay.ty import TensorType
from .registry import DEFAULT_DOMAIN, HIGHEST_OPSET


def check_unique_names(graph: onnx.GraphProto) -> None:
    """Fail on a value name defined twice or a graph output listed twice."""
    defined: dict[str, str] = {}

    def define(name: str, where: str) -> None:
        if name in defined:
            raise ConversionError(
                f"{name!r} is defined twice, by {defined[name]} and by {where}; every value must have one "
                "definition (ONNX graphs are in single static assignment form)"
            )
        defined[name] = where

    for init in graph.initializer:
        define(init.name, "an initializer")
    initializers = {init.name for init in graph.initializer}
    for vi in graph.input:
        if vi.name not in initializers:  # an initializer may also be listed as an input
            define(vi.name, "a graph input")
    for index, node in enumerate(graph.node):
        label = f"node {node.name or f'{node.op_type}_{index}'!r} ({node.op_type})"
        for out in node.output:
            if out:  # "" marks an optional output left out
                define(out, label)
    seen: set[str] = set()
    for out in graph.output:
        if out.name in seen:
            raise ConversionError(f"graph output {out.name!r} is listed twice; graph outputs need distinct names")
        seen.add(out.name)


def check_opsets(opsets: Mapping[str, int]) -> None:
    """Fail on an imported opset newer than the newest the converters follow."""
    for domain, version in sorted(opsets.items()):
        highest = HIGHEST_OPSET.get(domain)
        if highest is not None and version > highest:
            message = (f"the model imports opset {version} of domain {domain or 'ai.onnx'!r}; tessera knows "
                       f"that domain up to opset {highest}")
            if domain == DEFAULT_DOMAIN:
                message += " (onnx.version_converter.convert_version can lower the model's opset)"
            raise UnsupportedOperatorError(message)


def check_constant_operands(expr: Expr, known: set[int]) -> None:
    """`Op.validate` of every call in `expr` (not below the `known` expressions) with
    the operands that are constants; `expr` must be typed."""
    stack, seen = [expr], set(known)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, Call):
            stack.extend(e.args)
            if isinstance(e.op, Op) and e.op.validate is not None and any(isinstance(a, Constant) for a in e.args):
                shapes = [a.checked_type.shape if isinstance(a.checked_type, TensorType) else () for a in e.args]
                values = [np.asarray(a.data) if isinstance(a, Constant) else None for a in e.args]
                e.op.validate(shapes, values, e.attrs)
        elif isinstance(e, Tuple):
            stack.extend(e.fields)
        elif isinstance(e, TupleGetItem):
            stack.append(e.tuple_value)
