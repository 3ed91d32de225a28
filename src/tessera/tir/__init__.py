"""TIR: the loop-level IR (expressions, buffers, statements, PrimFunc)."""

from .buffer import Buffer, Scope
from .expr import BinOp, BufferLoad, Call, Cast, FloatImm, IntImm, Intrinsic, PrimExpr, Select, Var
from .stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt, PrimFunc, SeqStmt, Stmt

__all__ = [
    "Allocate", "BinOp", "Buffer", "BufferLoad", "BufferStore", "Call", "Cast", "Evaluate", "FloatImm",
    "For", "ForKind", "IfThenElse", "IntImm", "Intrinsic", "LetStmt", "PrimExpr", "PrimFunc", "Scope",
    "Select", "SeqStmt", "Stmt", "Var",
]
