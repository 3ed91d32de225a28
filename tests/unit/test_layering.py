"""The top-level packages of src/tessera import each other in one order (issue 17, acceptance).

A package may import itself and the packages below it in `ORDER`, never one
above: not at module level, not lazily inside a function, not under
`TYPE_CHECKING`. A strict order also means no import cycle between packages.
docs/architecture.md states the same order and says what each package does.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import tessera

PACKAGE_ROOT = Path(tessera.__file__).resolve().parent
DOCS = PACKAGE_ROOT.parents[1] / "docs" / "architecture.md"

# Lowest first. "__init__" is tessera/__init__.py itself (also what `from tessera import name` reads).
ORDER = (
    "errors", "dtype", "util", "crt", "tir", "te", "relay", "target", "runtime", "op", "transform", "codegen",
    "micro", "backend", "tune", "contrib", "frontend", "testing", "cli", "__init__", "__main__",
)
RANK = {name: k for k, name in enumerate(ORDER)}

@dataclass(frozen=True)
class Import:
    file: Path
    line: int
    text: str  # the import statement as written
    source: str  # the importing top-level package
    target: str  # the imported one

    def __str__(self) -> str:
        return (f"{self.file}:{self.line}: `{self.text}`: {self.source} may not import {self.target} "
                f"({self.target} is above {self.source} in the layering)")


def top_level_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts
    return parts[0].removesuffix(".py")


def _imported_modules(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute dotted names an import statement reads; `from pkg import name` gives pkg.name too."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = package[: len(package) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        return [f"{prefix}.{alias.name}" for alias in node.names]
    return []


def _import_target(name: str, root: Path) -> str | None:
    """The top-level package an absolute module name falls in; `tessera.name` is the package's own
    namespace (`__init__`) unless `name` is a subpackage or module."""
    parts = name.split(".")
    if parts[0] != "tessera":
        return None
    if len(parts) == 1:
        return "__init__"
    head = parts[1]
    if (root / head).is_dir() or (root / f"{head}.py").is_file():
        return head
    return "__init__"


def find_imports(root: Path) -> list[Import]:
    """Every import between top-level packages under `root` (a `tessera` package folder)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        is_package = rel.name == "__init__.py"
        module = ".".join(("tessera",) + rel.with_suffix("").parts)
        if is_package:
            module = module.removesuffix(".__init__")
        source = top_level_of(path, root)
        text = path.read_text()
        shown = path.relative_to(root.parent.parent)  # src/tessera/...
        for node in ast.walk(ast.parse(text, filename=str(path))):  # lazy and TYPE_CHECKING imports too
            for name in _imported_modules(node, module, is_package):
                target = _import_target(name, root)
                if target is not None and target != source:
                    found.append(Import(shown, node.lineno, ast.get_source_segment(text, node) or name,
                                        source, target))
    return found


def violations(imports: list[Import]) -> list[Import]:
    return [i for i in imports if RANK[i.target] > RANK[i.source]]


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return find_imports(PACKAGE_ROOT)


def test_every_top_level_package_has_a_place_in_the_order():
    present = {top_level_of(p, PACKAGE_ROOT) for p in PACKAGE_ROOT.rglob("*.py")}
    assert not present - set(ORDER), f"add {sorted(present - set(ORDER))} to ORDER and to docs/architecture.md"


def test_packages_import_only_packages_below_them(imports):
    found = violations(imports)
    assert not found, "imports against the layering:\n" + "\n".join(map(str, found))


def test_the_documented_order_is_the_tested_one():
    text = DOCS.read_text()
    stated = re.search(r"^errors < .*$", text, re.MULTILINE)
    assert stated is not None, f"{DOCS} states no order line starting 'errors < '"
    documented = [name.strip().removesuffix(".py") for name in stated.group(0).split("<")]
    assert tuple(documented) == ORDER


def test_a_lazy_or_type_checking_import_upwards_is_reported_with_its_file(tmp_path):
    root = tmp_path / "src" / "tessera"
    for folder in ("relay", "backend", "tir"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "tir" / "lazy.py").write_text("def f():\n    from ..backend import build\n    return build\n")
    (root / "tir" / "hint.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tessera.relay.expr import Call\n")
    (root / "tir" / "version.py").write_text("from .. import __version__\n")
    (root / "backend" / "fine.py").write_text("from ..tir import lazy\nimport tessera.relay\n")
    found = sorted(map(str, violations(find_imports(root))))
    assert found == [
        "src/tessera/tir/hint.py:3: `from tessera.relay.expr import Call`: tir may not import relay "
        "(relay is above tir in the layering)",
        "src/tessera/tir/lazy.py:2: `from ..backend import build`: tir may not import backend "
        "(backend is above tir in the layering)",
        "src/tessera/tir/version.py:1: `from .. import __version__`: tir may not import __init__ "
        "(__init__ is above tir in the layering)",
    ]
