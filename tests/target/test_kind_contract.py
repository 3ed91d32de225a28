"""The typed contract of a target kind: checked fields, defaults, registration and where kinds come from."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.cli import main as cli
from tessera.codegen.c_host import build_c_module
from tessera.op import elemwise as ew
from tessera.relay.module import IRModule
from tessera.target import KINDS, RELAY_TO_TIR, TAGS, Target, TargetError, TargetKind, register_tag
from tessera.target.describe import describe_kind
from tessera.target.plugins import load_plugins


@pytest.fixture
def cleanup():
    """Names of kinds and aliases to unregister after the test."""
    kinds: list[str] = []
    tags: list[str] = []
    yield kinds, tags
    for name in kinds:
        if name in KINDS:
            KINDS.remove(name)
    for name in tags:
        if name in TAGS:
            TAGS.remove(name)


@pytest.mark.parametrize("setter, value, message", [
    ("set_toolchain", 3, r"field 'toolchain' must be a callable \(Target\) -> Toolchain; got int \(not callable\)"),
    ("set_codegen", "c", r"field 'codegen' must be a callable \(IRModule, Target\) -> runtime module; got str"),
    ("set_pattern_table", [("a", None)], r"field 'pattern_table' must be a sequence of .*PatternEntry; got list "
                                         r"\(entry \('a', None\) is not a PatternEntry\)"),
    ("set_supported_ops", {"add": 3}, r"field 'supported_ops' must be a mapping .*\(entry 'add' is not a name "
                                      r"mapped to a bool or a callable\)"),
    ("set_bind_constants", "yes", r"field 'bind_constants' must be a bool; got str"),
    ("set_supports_op", None, r"field 'supports_op' must be a callable \(Target, op\) -> bool; got NoneType"),
])
def test_each_field_is_checked_when_set_with_the_kind_and_field_named(cleanup, setter, value, message):
    cleanup[0].append("typedkind")
    kind = TargetKind.register("typedkind", accelerator=True)
    with pytest.raises(TargetError, match=r"target kind 'typedkind': " + message):
        getattr(kind, setter)(value)


def test_set_attr_takes_the_four_hooks_only_and_lists_them(cleanup):
    cleanup[0].append("hookkind")
    kind = TargetKind.register("hookkind", accelerator=True)
    with pytest.raises(TargetError, match=r"unknown hook 'toolchain'; hooks: RelayToTIR, TIRToRuntime, "
                                          r"RelayToRuntime, UpdateConstants; .*set_toolchain\(\.\.\.\)"):
        kind.set_attr("toolchain", lambda t: None)  # type: ignore[call-overload]
    identity = lambda mod: mod  # noqa: E731  (a plain function IRModule -> IRModule is a RelayToTIR)
    assert kind.set_attr(RELAY_TO_TIR, identity).relay_to_tir is identity


def test_a_kind_without_a_toolchain_builds_with_the_host_c_toolchain(cleanup):
    cleanup[0].append("notoolchain")
    TargetKind.register("notoolchain", doc="only a code generator").set_codegen(build_c_module)
    x = relay.Var("x", relay.TensorType((4,), "float32"))
    lib = tessera.build(IRModule.from_expr(relay.Function((x,), ew.relu(x))), target="notoolchain")
    data = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(lib(data)[0], np.maximum(data, 0))
    assert "fields: codegen" in describe_kind(KINDS.get("notoolchain"))  # the default is not listed as set


def _write_module(folder, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(body))


def test_reimporting_a_registering_module_is_not_an_error(cleanup, tmp_path, monkeypatch):
    cleanup[0].append("notebookkind")
    cleanup[1].append("notebookalias")
    _write_module(tmp_path, "notebook_kind", """
        from tessera.target import TargetKind, register_tag
        KIND = TargetKind.register("notebookkind", accelerator=True, doc="registered by a module")
        register_tag("notebookalias", {"kind": "c", "accelerators": [{"kind": "notebookkind"}]})
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    first = importlib.import_module("notebook_kind")
    old = first.KIND
    again = importlib.reload(first)
    assert KINDS.get("notebookkind") is again.KIND and again.KIND is not old
    assert str(KINDS.get("notebookkind").origin) == "module notebook_kind (line 3)"
    sys.modules.pop("notebook_kind")


def test_another_kind_under_a_taken_name_is_an_error_naming_both(cleanup, tmp_path, monkeypatch):
    cleanup[0].append("clashkind")
    for name in ("first_owner", "second_owner"):
        _write_module(tmp_path, name, """
            from tessera.target import TargetKind
            TargetKind.register("clashkind", accelerator=True)
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("first_owner")
    with pytest.raises(TargetError, match=r"target kind 'clashkind' is already registered by module first_owner "
                                          r"\(line 3\); module second_owner \(line 3\) registers a different kind"):
        importlib.import_module("second_owner")
    for name in ("first_owner", "second_owner"):
        sys.modules.pop(name, None)
    with pytest.raises(TargetError, match="target kind 'c' is already registered by built in"):
        TargetKind.register("c")


def test_an_alias_with_another_meaning_is_an_error(cleanup):
    cleanup[1].append("twice")
    register_tag("twice", "c -mcpu=cortex-m4")
    register_tag("twice", "c -mcpu=cortex-m4")  # the same again: fine
    with pytest.raises(TargetError, match="target alias 'twice' is already registered as 'c -mcpu=cortex-m4'"):
        register_tag("twice", "c -mcpu=cortex-m7")


def _distribution(site, name: str, entry_point: str) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tessera.targets]\n{entry_point}\n")


def test_a_kind_lookup_loads_entry_points_and_remembers_the_distribution(cleanup, tmp_path, monkeypatch):
    cleanup[0].append("pluginkind")
    _distribution(tmp_path, "plugin-dist", "pk = plugin_kind:register")
    _write_module(tmp_path, "plugin_kind", """
        from tessera.target import TargetKind
        def register():
            TargetKind.register("pluginkind", doc="from an entry point").set_toolchain(lambda t: None)
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    kind = Target("pluginkind").kind  # not registered yet: the miss loads the entry points
    assert str(kind.origin) == ("distribution plugin-dist 1.0, entry point 'pk' (module plugin_kind, line 4)")
    sys.modules.pop("plugin_kind")


def test_a_failing_entry_point_names_its_distribution(tmp_path, monkeypatch):
    _distribution(tmp_path, "broken-dist", "bad = broken_kind")
    _write_module(tmp_path, "broken_kind", "raise ImportError('libfoo.so not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TargetError, match=r"loading target kinds from distribution broken-dist 1.0, entry point "
                                          r"'bad' \(broken_kind\) in group 'tessera.targets' failed: "
                                          r"ImportError: libfoo.so not found"):
        load_plugins()


def test_load_flag_imports_a_module_and_targets_shows_its_origin(cleanup, tmp_path, monkeypatch, capsys):
    cleanup[0].append("loadedkind")
    _write_module(tmp_path, "loaded_kind", """
        from tessera.target import TargetKind
        TargetKind.register("loadedkind", accelerator=True, doc="from --load")
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli(["targets", "loadedkind", "--load", "loaded_kind"]) == 0
    assert "from: module loaded_kind (line 3)" in capsys.readouterr().out
    assert cli(["targets", "c"]) == 0
    assert "from: built in (tessera.codegen.c_target)" in capsys.readouterr().out
    sys.modules.pop("loaded_kind")


def test_load_flag_with_a_missing_module_is_a_clear_error(capsys):
    assert cli(["targets", "--load", "no_such_target_module"]) == 2
    assert ("--load no_such_target_module: no module named 'no_such_target_module' on the Python path"
            in capsys.readouterr().err)
