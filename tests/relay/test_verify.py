"""The Relay verifier and its place in the pass infrastructure."""

from __future__ import annotations

import pytest

from tessera import relay
from tessera.errors import TesseraError, VerificationError
from tessera.op import elemwise as ew
from tessera.relay.expr import Call, FuncAttrs, Function, GlobalVar, Let, Tuple, TupleGetItem, Var
from tessera.relay.ty import TensorType, TupleType
from tessera.relay.verify import verify_function, verify_module
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.transform import InferType, Pass, PassContext, Sequential
from tessera.transform import pass_infra

T = TensorType((2,), "float32")


def var(name: str = "x") -> Var:
    return Var(name, T)


def typed(func: Function) -> relay.IRModule:
    return InferType()(relay.IRModule.from_expr(func))


def fails(func: Function, message: str, **kwargs) -> str:
    with pytest.raises(VerificationError, match=message) as info:
        verify_function(func, "@main", **kwargs)
    return str(info.value)


def test_valid_graphs_pass_typed_or_not():
    x, y = var("x"), var("y")
    shared = ew.add(x, x)
    func = Function((x,), Let(y, shared, ew.multiply(y, shared)))
    verify_function(func)
    verify_module(typed(func), require_types=True)


def test_types_are_required_after_type_inference():
    x = var()
    func = Function((x,), ew.add(x, x))
    text = fails(func, r"call of add has no checked type \(run InferType\)", require_types=True)
    assert text == (
        "@main: call of add has no checked type (run InferType)\n"
        "  1 | fn (%x: Tensor[(2,), float32]) {\n"
        "> 2 |   add(%x, %x)  // <<< no type\n"
        "  3 | }"
    )


def test_a_typed_function_is_typed_throughout():
    x = var()
    main = typed(Function((x,), ew.add(x, x))).main
    untyped_body = Function(main.params, ew.add(x, x), checked_type_=main.checked_type_)
    fails(untyped_body, "call of add has no checked type")


def test_stale_types_are_found():
    x = var()
    pair = Tuple((x, x)).with_type(TupleType((T, TensorType((3,), "float32"))))
    fails(Function((x,), TupleGetItem(pair, 0)), r"a Tuple is typed .* but its parts give .*\(a stale type\)")
    y = Var("y", TensorType((3,), "float32"))
    let = Let(y, x, y)
    fails(Function((x,), let), r"let %y: Tensor\[\(3,\), float32\] is bound to a Tensor\[\(2,\), float32\] value")
    declared = Function((x,), ew.add(x, x), ret_type=TensorType((3,), "float32"))
    fails(typed_body(declared), r"a function declares return type Tensor\[\(3,\), float32\], its body has Tensor\[\(2,")


def typed_body(func: Function) -> Function:
    """`func` with its body typed, itself not (InferType would refuse the function)."""
    body = typed(Function(func.params, func.body)).main.body
    return Function(func.params, body, func.ret_type, func.attrs)


def test_each_variable_is_bound_once():
    x = var()
    text = fails(Function((x,), Let(x, ew.add(x, x), x)), r"%x is bound twice \(by a let and by a function's parameters\)")
    assert "> 1 | fn (%x: Tensor[(2,), float32]) {  // <<< %x bound again" in text
    fails(Function((x, x), x), "a function lists the same parameter twice")
    inner = Function((x,), x)
    fails(Function((x,), Call(inner, (x,))), "%x is bound twice")


def test_variables_are_used_inside_their_scope():
    x, y = var("x"), var("y")
    text = fails(Function((x,), ew.add(x, y)), "%y is used outside any scope that binds it: a module's function")
    assert "> 2 |   add(%x, %y)  // <<< free %y" in text
    # a let's variable is not in scope in its own value
    fails(Function((x,), Let(y, ew.add(y, x), y)), "%y is used outside any scope that binds it")
    # a variable of one function used in another
    f = Function((y,), y)
    fails(Function((x,), Tuple((Call(f, (x,)), y))), r"%y is used outside .* \(it is bound by a function's parameters, elsewhere\)")


def test_closures_are_allowed_but_kernels_are_closed():
    x, y = var("x"), var("y")
    closure = Function((y,), ew.add(x, y))
    verify_function(Function((x,), Call(closure, (x,))))
    kernel = Function((y,), ew.add(x, y), attrs=FuncAttrs(primitive=True))
    fails(Function((x,), Call(kernel, (x,))), "%x is used outside any scope that binds it: a primitive function")
    external = Function((y,), ew.add(x, y), attrs=FuncAttrs(compiler="blas"))
    fails(Function((x,), Call(external, (x,))), r"an external \(blas\) function must be closed")


def test_calls_match_their_callee_arity():
    x = var()
    fails(Function((x,), Call(ew.add, (x,))), "call of add passes 1 argument, expected 2")
    fails(Function((x,), Call(Function((var("a"), var("b")), x), (x,))),
          "call of a function passes 1 argument, expected 2")
    a, out = Buffer("a", (2,), "float32"), Buffer("out", (2,), "float32")
    i = E.Var("i")
    kernel = S.PrimFunc("k", (a, out), S.For(i, E.IntImm(2), S.BufferStore(out, E.BufferLoad(a, (i,), "float32"), (i,))), 1)
    mod = relay.IRModule({GlobalVar("main"): Function((x,), Call(GlobalVar("k"), (x, x))), GlobalVar("k"): kernel})
    with pytest.raises(VerificationError, match="call of PrimFunc @k passes 2 arguments, expected 1"):
        verify_module(mod)
    mod = relay.IRModule({GlobalVar("main"): Function((x,), Call(GlobalVar("gone"), (x,)))})
    with pytest.raises(VerificationError, match="call of @gone, which is not in the module"):
        verify_module(mod)


def test_verify_module_checks_primfuncs_too():
    a = Buffer("a", (2,), "float32")
    broken = S.PrimFunc("k", (a,), S.BufferStore(Buffer("b", (2,), "float32"), E.FloatImm(0.0), (E.IntImm(0),)), 1)
    with pytest.raises(VerificationError, match="PrimFunc k: store into buffer b"):
        verify_module(relay.IRModule({GlobalVar("k"): broken}))


# ------------------------------------------------------------------ pass infrastructure

class _Breaks(Pass):
    """Adds an unbound variable to main."""

    name = "Breaks"

    def transform(self, mod, ctx):
        main = mod.main
        return mod.with_function("main", Function(main.params, ew.add(main.body, var("stray"))))


class _Identity(Pass):
    name = "Identity"

    def transform(self, mod, ctx):
        return mod


def _mod() -> relay.IRModule:
    x = var()
    return relay.IRModule.from_expr(Function((x,), ew.add(x, x)))


def test_verification_runs_after_every_pass_when_configured():
    with pytest.raises(VerificationError, match="^pass Breaks produced invalid IR: @main: %stray is used outside"):
        _Breaks()(_mod(), PassContext(config={"verify": True}))
    _Breaks()(_mod(), PassContext(config={"verify": False}))  # off: the broken module goes through


def test_broken_input_is_not_blamed_on_the_pass():
    bad = _Breaks()(_mod(), PassContext(config={"verify": False}))
    with pytest.raises(VerificationError, match="^the input of pass Identity is already invalid: @main: %stray"):
        _Identity()(bad, PassContext(config={"verify": True}))


def test_infer_type_output_must_be_typed_everywhere(monkeypatch):
    monkeypatch.setattr(InferType, "transform", lambda self, mod, ctx: mod)  # a type inference that does nothing
    with pytest.raises(VerificationError, match="pass InferType produced invalid IR: @main: call of add has no checked type"):
        InferType()(_mod(), PassContext(config={"verify": True}))


def test_nested_contexts_inherit_the_setting():
    with PassContext(config={"verify": True}):
        inner = PassContext(opt_level=3)
        assert inner.verify
        assert not PassContext(config={"verify": False}).verify
        with PassContext(config={"verify": False}):
            assert not PassContext().verify
    with PassContext(config={"verify": False}):
        assert not PassContext().verify


def test_the_setting_is_a_bool():
    with pytest.raises(TesseraError, match="PassContext config 'verify': got 'yes', expected True or False"):
        PassContext(config={"verify": "yes"})


def test_verification_costs_nothing_when_off_and_runs_once_per_pass(monkeypatch):
    calls = []
    monkeypatch.setattr(pass_infra, "verify_module", lambda mod, require_types=False: calls.append(mod))
    seq = Sequential([_Identity(), _Identity()])
    seq(_mod(), PassContext(config={"verify": False}))
    assert calls == []
    seq(_mod(), PassContext(config={"verify": True}))
    assert len(calls) == 2  # one per pass; the Sequential itself adds none


def test_the_test_suite_runs_with_verification_on():
    assert PassContext.current().verify
    assert PassContext().verify


def test_the_error_examples_of_the_docs_are_current():
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "verifier.md").read_text()
    with pytest.raises(VerificationError) as relay_error:
        _Breaks()(_mod(), PassContext(config={"verify": True}))
    assert f"```\n{relay_error.value}\n```" in docs
    a, out = Buffer("a", (4,), "float32"), Buffer("out", (4,), "float32")
    tmp, i = Buffer("tmp", (4,), "float32"), E.Var("i")
    store = S.BufferStore(tmp, E.BufferLoad(a, (i,), "float32"), (i,))
    with pytest.raises(VerificationError) as tir_error:
        verify_module(relay.IRModule({GlobalVar("f"): S.PrimFunc("f", (a, out), S.For(i, E.IntImm(4), store), 1)}))
    assert f"```\n{tir_error.value}\n```" in docs
