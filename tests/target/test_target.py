"""Target kinds, targets, composite targets, aliases and named sub-targets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera
from tessera import relay
from tessera.op import elemwise as ew
from tessera.relay.module import IRModule
from tessera.target import (
    KINDS, RELAY_TO_TIR, TAGS, TIR_TO_RUNTIME, OptionType, Target, TargetError, TargetKind,
    parse_named_targets, register_tag,
)
from tessera.codegen.c_host import build_c_module
from tessera.target.builtin import c_toolchain
from tessera.transform import Pass


@pytest.fixture
def scratch_kinds():
    """Register kinds/tags for one test and remove them afterwards."""
    made_kinds, made_tags = [], []

    def kind(name: str, **kw) -> TargetKind:
        made_kinds.append(name)
        return TargetKind.register(name, **kw)

    def tag(name: str, spec) -> None:
        made_tags.append(name)
        register_tag(name, spec)

    yield kind, tag
    for name in made_tags:
        TAGS.remove(name)
    for name in made_kinds:
        KINDS.remove(name)


# ------------------------------------------------------------ construction
def test_target_from_string_dict_json_and_back():
    t = Target("c -mcpu=cortex-m7 -mfloat-abi=hard")
    assert t["mcpu"] == "cortex-m7" and t["mfloat-abi"] == "hard"
    assert Target({"kind": "c", "mcpu": "cortex-m7", "mfloat-abi": "hard"}) == t
    assert Target(t.to_json()) == t
    assert Target(str(t)) == t
    assert str(t) == "c -mcpu=cortex-m7 -mfloat-abi=hard"
    assert hash(Target("c -mcpu=cortex-m7 -mfloat-abi=hard")) == hash(t)
    assert Target("c") != t


def test_targets_are_immutable():
    t = Target("c")
    with pytest.raises(AttributeError):
        t.kind = None  # type: ignore[misc]
    changed = t.with_attrs(mcpu="cortex-m4")
    assert t["mcpu"] is None and changed["mcpu"] == "cortex-m4"


def test_typed_attributes(scratch_kinds):
    kind, _ = scratch_kinds
    kind("typed").add_attr_option("n", OptionType.INT, default=4).add_attr_option("fast", OptionType.BOOL, default=False) \
        .add_attr_option("libs", OptionType.STR_LIST, default=()).add_attr_option("inner", OptionType.TARGET)
    t = Target("typed -n=8 -fast -libs=a,b -inner=c")
    assert (t["n"], t["fast"], t["libs"], t["inner"]) == (8, True, ("a", "b"), Target("c"))
    assert Target(str(t)) == t
    assert Target("typed")["n"] == 4
    assert Target({"kind": "typed", "inner": {"kind": "c", "mcpu": "cortex-m4"}})["inner"]["mcpu"] == "cortex-m4"


@pytest.mark.parametrize("spec, message", [
    ("cuda", r"unknown target kind 'cuda'.*known kinds: blas, c, composite, onnxruntime; aliases: blas, onnxruntime"),
    ("cc", r"did you mean 'c'\?"),
    ("c -mcpuu=cortex-m4", r"no attribute 'mcpuu' \(did you mean 'mcpu'\?\).*valid attributes"),
    ("c -mfloat-abi=hardd", r"'mfloat-abi' got 'hardd' \(did you mean 'hard'\?\); valid values: hard, soft, softfp"),
    ("c -mcpu", r"attribute 'mcpu' needs a value"),
    ("c mcpu=cortex-m4", r"expected '-name=value' or '-flag', got 'mcpu=cortex-m4'"),
    ("", r"empty target string"),
    ('{"kind": 3}', r"'kind' must be a string"),
    ("{nope", r"malformed target JSON"),
    ({"mcpu": "x"}, r"has no 'kind'"),
    ({"kind": "c", "mattr": "avx2"}, r"'mattr' expects a list of strings, got 'avx2'"),
    ("c -mcpu=cortex-m0 -mfloat-abi=hard", r"cortex-m0 has no FPU"),
    ("c -mcpu=cortex-m9", r"unknown Cortex-M core 'cortex-m9'"),
    ("c -accelerators=c", r"'c' is not an accelerator kind"),
    ("composite", r"composite target needs a host"),
    (3, r"a target is a string, a dict or a Target"),
])
def test_bad_targets_name_the_piece_at_fault(spec, message):
    with pytest.raises(TargetError, match=message):
        Target(spec)


# ---------------------------------------------------- composites and aliases
def test_accelerators_composites_and_aliases(scratch_kinds):
    kind, tag = scratch_kinds
    kind("myaccel", accelerator=True).add_attr_option("cores", OptionType.INT, default=1)
    with pytest.raises(TargetError, match="accelerator and cannot be used alone"):
        Target({"kind": "myaccel"})
    as_attr = Target("c -accelerators=myaccel")
    as_kind = Target({"kind": "composite", "host": "c", "accelerators": [{"kind": "myaccel", "cores": 2}]})
    assert as_attr.host == Target("c") and [a.kind.name for a in as_attr.accelerators] == ["myaccel"]
    assert as_kind.host == Target("c") and as_kind.accelerators[0]["cores"] == 2
    assert Target(str(as_kind)) == as_kind  # nested attributes fall back to JSON
    tag("myaccel", {"kind": "c", "accelerators": [{"kind": "myaccel"}]})
    assert Target("myaccel") == as_attr
    with pytest.raises(TargetError, match="use the alias 'myaccel'"):
        Target({"kind": "myaccel"})


# --------------------------------------------------------------------- hooks
class _Identity(Pass):
    name = "Identity"

    def __init__(self):
        self.calls = 0

    def transform(self, mod, ctx):
        self.calls += 1
        return mod


def _tiny_model():
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    return IRModule.from_expr(relay.Function((x,), ew.relu(x)))


def test_hooks_are_typed_and_found(scratch_kinds):
    kind, _ = scratch_kinds
    lowering = _Identity()
    k = kind("hooked").set_attr(RELAY_TO_TIR, lowering)
    assert Target("hooked").kind.relay_to_tir is lowering
    assert Target("hooked").kind.tir_to_runtime is None
    with pytest.raises(TargetError, match=r"target kind 'hooked': hook RelayToTIR must be a callable "
                                          r"IRModule -> IRModule.*got int"):
        k.set_attr(RELAY_TO_TIR, 3)
    with pytest.raises(TargetError, match="hook TIRToRuntime must be a callable"):
        k.set_attr(TIR_TO_RUNTIME, 42)
    with pytest.raises(TargetError, match="unknown hook 'RelayToTir'.*did you mean 'RelayToTIR'"):
        k.set_attr("RelayToTir", lowering)


def _host_kind(kind, name):
    from tessera.codegen.c_target import C_KIND

    return kind(name).set_toolchain(C_KIND.toolchain).set_codegen(build_c_module)


def test_build_reads_hooks_and_toolchain_from_the_target(scratch_kinds):
    kind, _ = scratch_kinds
    lowering = _Identity()
    generated = []

    def tir_to_runtime(mod, target):
        from tessera.codegen.c_host import build_c_module

        generated.append(target.kind.name)
        return build_c_module(mod, target)

    _host_kind(kind, "myhost").set_attr(RELAY_TO_TIR, lowering).set_attr(TIR_TO_RUNTIME, tir_to_runtime)
    lib = tessera.build(_tiny_model(), target="myhost")
    assert lowering.calls == 1 and generated == ["myhost"]
    x = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(lib(x)[0], np.maximum(x, 0))


def test_failing_or_mistyped_hooks_are_named(scratch_kinds):
    kind, _ = scratch_kinds

    def broken(mod, target):
        raise RuntimeError("library not found")

    _host_kind(kind, "brokenhost").set_attr(TIR_TO_RUNTIME, broken)
    with pytest.raises(TargetError, match=r"target kind 'brokenhost', hook TIRToRuntime failed: RuntimeError: library not found"):
        tessera.build(_tiny_model(), target="brokenhost")
    _host_kind(kind, "liarhost").set_attr(TIR_TO_RUNTIME, lambda mod, target: "not a module")
    with pytest.raises(TargetError, match=r"target kind 'liarhost', hook TIRToRuntime returned str, expected a runtime module"):
        tessera.build(_tiny_model(), target="liarhost")


def test_micro_targets_are_refused_by_the_graph_executor():
    with pytest.raises(tessera.TesseraError, match="builds code for another machine"):
        tessera.build(_tiny_model(), target="c -mcpu=cortex-m7")


# ----------------------------------------------------------------- toolchains
@pytest.mark.parametrize("spec, expected", [
    ("c", ["gcc", "-O3", "-march=native"]),
    ("c -march=x86-64-v3", ["gcc", "-march=x86-64-v3"]),
    ("c -mcpu=cortex-m0", ["arm-none-eabi-gcc", "-mcpu=cortex-m0", "-mthumb", "-mfloat-abi=soft"]),
    ("c -mcpu=cortex-m4", ["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]),
    ("c -mcpu=cortex-m7 -mfloat-abi=soft", ["arm-none-eabi-gcc", "-mcpu=cortex-m7", "-mfloat-abi=soft"]),
    ("c -mcpu=cortex-m55", ["arm-none-eabi-gcc", "-mcpu=cortex-m55", "-mfloat-abi=hard"]),
])
def test_target_maps_to_its_toolchain(spec, expected):
    tc = c_toolchain(Target(spec))
    words = [tc.cc, *tc.cflags]
    assert all(w in words for w in expected), words
    assert tc.is_host == (tc.cc == "gcc")
    assert ("workspace_heap.c" in tc.runtime_sources) == tc.is_host


# --------------------------------------------------------- named sub-targets
def test_named_sub_targets_allow_two_pieces_of_one_kind():
    config = parse_named_targets("low_power_cpu: c -mcpu=cortex-m0; inference_cpu: c -mcpu=cortex-m7")
    assert list(config) == ["low_power_cpu", "inference_cpu"]
    assert config.host_name == "low_power_cpu"
    assert config["inference_cpu"] == Target("c -mcpu=cortex-m7")
    assert parse_named_targets(str(config)).pieces == config.pieces
    other = parse_named_targets({"a": "c", "b": "c -mcpu=cortex-m4"}, host="b")
    assert other.host == Target("c -mcpu=cortex-m4")


@pytest.mark.parametrize("spec, kwargs, message", [
    ("a: c; a: c -mcpu=cortex-m4", {}, "piece name 'a' is used twice"),
    ("a: c; c -mcpu=cortex-m4", {}, "has no name; write it as 'name: c -mcpu=cortex-m4'"),
    ("a: c", {"host": "b"}, "host piece 'b' is not defined"),
    ("a b: c", {}, "'a b' is not a valid piece name"),
    ("a: cuda", {}, "piece 'a': unknown target kind 'cuda'"),
    ("", {}, "empty description"),
])
def test_bad_named_targets(spec, kwargs, message):
    with pytest.raises(TargetError, match=message):
        parse_named_targets(spec, **kwargs)
    with pytest.raises(TargetError):
        parse_named_targets(spec, **kwargs)["zz"]


def test_unknown_piece_lookup_suggests():
    config = parse_named_targets("fast: c; slow: c -mcpu=cortex-m0")
    with pytest.raises(TargetError, match="no target piece named 'slwo' \\(did you mean 'slow'\\?\\)"):
        config["slwo"]


# ------------------------------------------------------------ property tests
_cores = st.sampled_from(["cortex-m0", "cortex-m3", "cortex-m4", "cortex-m7", "cortex-m55", None])
_abis = st.sampled_from([None, "soft", "softfp", "hard"])


@st.composite
def c_targets(draw):
    attrs = {"kind": "c"}
    core = draw(_cores)
    if core:
        attrs["mcpu"] = core
        abi = draw(_abis)
        if abi and (abi == "soft" or core not in ("cortex-m0", "cortex-m3")):
            attrs["mfloat-abi"] = abi
    mattr = draw(st.lists(st.sampled_from(["avx2", "fma", "dsp"]), max_size=2, unique=True))
    if mattr:
        attrs["mattr"] = mattr
    keys = draw(st.lists(st.sampled_from(["cpu", "arm", "x86"]), max_size=2, unique=True))
    if keys:
        attrs["keys"] = keys
    return Target(attrs)


@settings(max_examples=150, deadline=None)
@given(c_targets())
def test_print_parse_round_trip(target):
    assert Target(str(target)) == target
    assert Target(target.to_json()) == target
    assert Target(json.loads(target.to_json())) == target


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_garbage_strings_raise_target_error_only(text):
    try:
        Target(text)
    except TargetError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["c", "-mcpu=", "cortex-m4", "-mattr=a,b", "=", "-", "{", "}", ";", ":",
                                 "composite", "-host=c", "-accelerators=", ",", " ", "-keys", "x"]), max_size=8))
def test_near_miss_strings_raise_target_error_only(tokens):
    for text in ("".join(tokens), " ".join(tokens)):
        try:
            Target(text)
        except TargetError:
            pass
        try:
            parse_named_targets(text)
        except TargetError:
            pass
