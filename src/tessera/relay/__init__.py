"""Relay: the graph IR (expressions, types, modules, traversal, printing)."""

from .expr import Call, Constant, Expr, FuncAttrs, Function, GlobalVar, Let, Tuple, TupleGetItem, Var, const
from .module import IRModule
from .ty import FuncType, TensorType, TupleType, Type

__all__ = [
    "Call", "Constant", "Expr", "FuncAttrs", "FuncType", "Function", "GlobalVar", "IRModule", "Let",
    "TensorType", "Tuple", "TupleGetItem", "TupleType", "Type", "Var", "const",
]
