"""docs/adding-a-target.md cannot rot: each code block runs, or is word for word part of the example package."""

from __future__ import annotations

import re
from pathlib import Path

from tessera.runtime import external
from tessera.target import KINDS, TAGS

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "adding-a-target.md"
EXAMPLE = ROOT / "examples" / "tessera-example-target"
RUNNABLE = "import tessera\n"  # a block that imports tessera is a whole program: it is run, not looked up


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(\w*)\n(.*?)```", GUIDE.read_text(), re.S)


def _example_text() -> str:
    files = sorted(p for p in EXAMPLE.rglob("*") if p.suffix in (".py", ".c", ".toml", ".md"))
    return "\n".join(p.read_text() for p in files)


def test_every_snippet_is_part_of_the_example_package():
    example = _example_text()
    snippets = [(lang, text) for lang, text in _blocks() if lang in ("python", "c", "toml", "sh")
                and RUNNABLE not in text]
    assert len(snippets) >= 9  # pattern table, RelayToTIR, the marking, TIRToRuntime, C, registration, toml, sh
    for lang, text in snippets:
        assert text in example, f"this {lang} block of the guide is not in {EXAMPLE.name}:\n{text}"


def test_every_whole_program_runs(capsys):
    programs = [text for lang, text in _blocks() if lang == "python" and RUNNABLE in text]
    assert programs
    try:
        for text in programs:
            exec(compile(text, str(GUIDE), "exec"), {})
        assert "tsgen_default_numpy_matmul_0" in capsys.readouterr().out
    finally:
        for registry, name in ((KINDS, "numpy_matmul"), (TAGS, "numpy_matmul")):
            if name in registry:
                registry.remove(name)
        external._LOADERS.pop("numpy_matmul", None)


def test_the_partition_function_shown_is_what_partitioning_makes():
    """The printed partition in section 2 names the attributes PartitionGraph really sets."""
    import importlib
    import sys

    sys.path.insert(0, str(EXAMPLE / "src"))
    try:
        importlib.import_module("tessera_example_target")
        _check_partition()
    finally:
        sys.path.remove(str(EXAMPLE / "src"))
        sys.modules.pop("tessera_example_target", None)
        KINDS.remove("exaccel")
        TAGS.remove("exaccel")


def _check_partition() -> None:
    import numpy as np

    import tessera
    from tessera import relay
    from tessera.op.nn.matmul import matmul

    a = relay.Var("a", relay.TensorType((4, 16), "float32"))
    b = relay.Var("b", relay.TensorType((16, 8), "float32"))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((a, b), matmul(a, b))), target="exaccel")
    x, y = np.ones((4, 16), np.float32), np.ones((16, 8), np.float32)
    np.testing.assert_array_equal(lib(x, y)[0], x @ y)
    (partition,) = [f for gv, f in lib.partitioned_mod.items() if getattr(f.attrs, "compiler", None) == "exaccel"]
    assert partition.attrs.global_symbol == "tsgen_default_exaccel_0"
    assert partition.body.op.attrs.composite == "exaccel.matmul"
    guide = GUIDE.read_text()
    assert 'compiler="exaccel", global_symbol="tsgen_default_exaccel_0"' in guide
    assert 'composite="exaccel.matmul"' in guide
