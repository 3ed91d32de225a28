"""InferType: give every expression its checked type.

Types flow bottom-up: variables carry annotations, constants their data's
type, and each operator call is typed by the operator's type relation. A
relation that rejects its inputs is reported with the call that failed.
"""

from __future__ import annotations

from ..errors import TesseraError, TypeInferenceError
from ..relay.expr import Call, Constant, Expr, Function, GlobalVar, Let, Tuple, TupleGetItem, Var
from ..relay.module import IRModule
from ..relay.ty import FuncType, TensorType, TupleType, Type
from ..relay.visitor import rewrite
from ..tir.stmt import PrimFunc
from .pass_infra import Pass, PassContext


def primfunc_type(f: PrimFunc) -> FuncType:
    ins = tuple(TensorType(b.shape, b.dtype) for b in f.inputs)
    outs = tuple(TensorType(b.shape, b.dtype) for b in f.outputs)
    ret: Type = outs[0] if len(outs) == 1 else TupleType(outs)
    return FuncType(ins, ret)


def global_type(mod: IRModule | None, gv: GlobalVar) -> FuncType:
    if mod is None or gv not in mod:
        raise TypeInferenceError(f"call to unknown global @{gv.name_hint}")
    func = mod[gv]
    if isinstance(func, PrimFunc):
        return primfunc_type(func)
    ty = func.checked_type_
    if ty is None:
        ty = infer_function(func, mod).checked_type
    assert isinstance(ty, FuncType)
    return ty


def describe_call(call: Call, arg_types: list[Type]) -> str:
    from ..relay.printer import _attrs_text

    name = call.op.name if not isinstance(call.op, (Function, GlobalVar)) else "function call"
    attrs = _attrs_text(call.attrs) if not isinstance(call.op, (Function, GlobalVar)) else ""
    args = ", ".join(map(str, arg_types))
    return f"{name}({args}{', ' + attrs if attrs else ''})"


def _type_of(new: Expr, mod: IRModule | None) -> Type:
    if isinstance(new, Var):
        if new.type_annotation is None:
            raise TypeInferenceError(f"variable %{new.name_hint} has no type annotation")
        return new.type_annotation
    if isinstance(new, Constant):
        return new.checked_type
    if isinstance(new, GlobalVar):
        return global_type(mod, new)
    if isinstance(new, Tuple):
        return TupleType(tuple(f.checked_type for f in new.fields))
    if isinstance(new, TupleGetItem):
        tt = new.tuple_value.checked_type
        if not isinstance(tt, TupleType) or not 0 <= new.index < len(tt.fields):
            raise TypeInferenceError(f"cannot take item {new.index} of {tt}")
        return tt.fields[new.index]
    if isinstance(new, Function):
        ret = new.body.checked_type
        if new.ret_type is not None and new.ret_type != ret:
            raise TypeInferenceError(f"function declares return type {new.ret_type}, body has {ret}")
        return FuncType(tuple(p.checked_type for p in new.params), ret)
    if isinstance(new, Let):
        return new.body.checked_type
    if isinstance(new, Call):
        arg_types = [a.checked_type for a in new.args]
        if isinstance(new.op, (Function, GlobalVar)):
            fty = new.op.checked_type
            assert isinstance(fty, FuncType)
            if tuple(arg_types) != fty.arg_types:
                raise TypeInferenceError(
                    f"call passes ({', '.join(map(str, arg_types))}) to a function of type {fty}"
                )
            return fty.ret_type
        try:
            new.op.check_arity(len(arg_types))
            return new.op.type_rel(tuple(arg_types), new.attrs)
        except TypeInferenceError as err:
            raise TypeInferenceError(f"{describe_call(new, arg_types)}: {err}") from None
        except TesseraError:
            raise
        except Exception as err:  # a relation's own bug: still name the call
            raise TypeInferenceError(
                f"{describe_call(new, arg_types)}: type relation failed with "
                f"{type(err).__name__}: {err}"
            ) from err
    raise TypeInferenceError(f"cannot type {type(new).__name__}")


def infer_expr(expr: Expr, mod: IRModule | None = None, incremental: bool = False) -> Expr:
    """`expr` rebuilt with checked types on every node.

    With `incremental=True`, sub-expressions that already carry a type are
    trusted as they are: builders that type each new node as they go (the
    ONNX importer) then pay only for the new nodes.
    """

    def visit(old: Expr, new: Expr) -> Expr | None:
        if incremental and old is not expr and old.checked_type_ is not None:
            return None
        ty = _type_of(new, mod)
        if new.checked_type_ == ty:
            return new
        return new.with_type(ty)

    is_leaf = (lambda n: n.checked_type_ is not None) if incremental else None
    return rewrite(expr, visit, is_leaf=is_leaf)


def infer_function(func: Expr, mod: IRModule | None = None, incremental: bool = False) -> Function:
    """`infer_expr` for a function, or a rewrite of one that must still be one."""
    typed = infer_expr(func, mod, incremental)
    if not isinstance(typed, Function):
        raise TypeError(f"expected a Function, got {type(typed).__name__}")
    return typed


class InferType(Pass):
    name = "InferType"
    opt_level = 0
    types_every_node = True

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        result = mod
        for gv, func in mod.items():
            if isinstance(func, Function):
                typed = infer_function(func, result)
                if typed is not func:
                    result = result.with_function(gv, typed)
        return result
