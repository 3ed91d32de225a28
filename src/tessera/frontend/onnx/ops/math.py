"""Converters for elementwise arithmetic and activations."""

from __future__ import annotations

from ....op import elemwise as ew
from ....relay.expr import Expr
from ..importer import ImportContext, Node
from ..registry import converter
from .common import scalar

_BINARY = {"Add": ew.add, "Sub": ew.subtract, "Mul": ew.multiply, "Div": ew.divide}


def _register_binary(op_type: str, op) -> None:
    @converter(op_type, since=1)
    def convert(node: Node, ctx: ImportContext) -> Expr:
        if node.opset < 7 and int(node.attr("broadcast", 0)) and "axis" in node.attrs:
            raise node.error("legacy broadcast with an explicit axis is not supported")
        return op(node.input(0), node.input(1))


for _name, _op in _BINARY.items():
    _register_binary(_name, _op)


@converter("Sum", since=1)
def sum_(node: Node, ctx: ImportContext) -> Expr:
    out = node.input(0)
    for k in range(1, len(node.inputs)):
        out = ew.add(out, node.input(k))
    return out


@converter("Relu", since=1)
def relu(node: Node, ctx: ImportContext) -> Expr:
    return ew.relu(node.input(0))


@converter("Sigmoid", since=1)
def sigmoid(node: Node, ctx: ImportContext) -> Expr:
    return ew.sigmoid(node.input(0))


@converter("Tanh", since=1)
def tanh(node: Node, ctx: ImportContext) -> Expr:
    return ew.tanh(node.input(0))


@converter("LeakyRelu", since=1)
def leaky_relu(node: Node, ctx: ImportContext) -> Expr:
    return ew.leaky_relu(node.input(0), alpha=float(node.attr("alpha", 0.01)))


@converter("Identity", since=1)
def identity(node: Node, ctx: ImportContext) -> Expr:
    return node.input(0)


__all__ = ["scalar"]
