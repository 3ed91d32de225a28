"""`tessera ops` and `tessera targets`: what tessera supports."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .flags import add_load_flag, non_empty

if TYPE_CHECKING:  # the importer loads when `tessera ops` runs
    from ..frontend.onnx.registry import ConverterRegistry


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ops", help="list the ONNX operators (with their opsets) and TFLite operators tessera "
                                   "can import",
                       description="Every operator the ONNX importer converts, per domain (ai.onnx and "
                                   "com.microsoft), with the opsets it accepts and the opsets where its "
                                   "converter changes; then the TFLite builtin operators.")
    p.set_defaults(func=ops)
    p = sub.add_parser("targets", help="list target kinds with their attributes, defaults, hooks and where they come from",
                       description="Without KIND: every registered target kind and alias. With KIND: that kind.")
    p.add_argument("kind", nargs="?", type=non_empty, help="a target kind name, e.g. c")
    add_load_flag(p)
    p.set_defaults(func=targets)


def ops(args: argparse.Namespace) -> int:
    from ..frontend.onnx import ops as _ops  # noqa: F401
    from ..frontend.onnx.registry import CONVERTERS, DEFAULT_DOMAIN, HIGHEST_OPSET

    domains = sorted(CONVERTERS.domains(), key=lambda d: (d != DEFAULT_DOMAIN, d))
    for i, domain in enumerate(domains):
        print(("\n" if i else "") + op_table(CONVERTERS, domain, HIGHEST_OPSET[domain]))

    from ..frontend.tflite import CONVERTERS as TFLITE_CONVERTERS
    from ..frontend.tflite import ops as _tflite_ops  # noqa: F401

    tflite_names = TFLITE_CONVERTERS.op_names()
    print(f"\n{len(tflite_names)} TFLite builtin operators:")
    print(", ".join(tflite_names))
    return 0


def op_table(registry: ConverterRegistry, domain: str, highest: int) -> str:
    """One line per operator of `domain`: the opsets it imports, and where its converter changes."""
    names = registry.op_types(domain)
    label = domain or "ai.onnx"
    lines = [f"{len(names)} operators of domain {label} (opsets up to {highest}):"]
    width = max(len(n) for n in names)
    for name in names:
        versions = registry.versions(name, domain)
        span = f"{versions[0]}-{highest}" if versions[0] < highest else f"{highest}"
        changes = f"  (converters from opsets {', '.join(map(str, versions))})" if len(versions) > 1 else ""
        lines.append(f"  {name:<{width}}  {span}{changes}")
    return "\n".join(lines)


def version_text() -> str:
    """tessera's version (from the installed package's metadata) and those of what it runs on."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from ..util.version import __version__

    def installed(package: str, fallback: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return fallback

    return (f"tessera {installed('tessera', __version__)}\n"
            f"python {platform.python_version()}, numpy {installed('numpy', 'not installed')}, "
            f"onnx {installed('onnx', 'not installed')}")


class VersionAction(argparse.Action):
    """`tessera --version`: print `version_text()` and exit 0 (read only when asked for)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(version_text())
        parser.exit()


def targets(args: argparse.Namespace) -> int:
    from ..target import KINDS
    from ..target.describe import describe_all, describe_kind

    print(describe_kind(KINDS.get(args.kind)) if args.kind else describe_all())
    return 0
