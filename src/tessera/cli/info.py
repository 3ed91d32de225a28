"""`tessera ops` and `tessera targets`: what tessera supports."""

from __future__ import annotations

import argparse

from .flags import add_load_flag, non_empty


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ops", help="list the ONNX and TFLite operators tessera can import")
    p.set_defaults(func=ops)
    p = sub.add_parser("targets", help="list target kinds with their attributes, defaults, hooks and where they come from",
                       description="Without KIND: every registered target kind and alias. With KIND: that kind.")
    p.add_argument("kind", nargs="?", type=non_empty, help="a target kind name, e.g. c")
    add_load_flag(p)
    p.set_defaults(func=targets)


def ops(args: argparse.Namespace) -> int:
    from ..frontend.onnx import ops as _ops  # noqa: F401
    from ..frontend.onnx.registry import CONVERTERS

    from ..frontend.tflite import CONVERTERS as TFLITE_CONVERTERS
    from ..frontend.tflite import ops as _tflite_ops  # noqa: F401

    names = CONVERTERS.op_types()
    print(f"{len(names)} ONNX operators:")
    print(", ".join(names))
    tflite_names = TFLITE_CONVERTERS.op_names()
    print(f"\n{len(tflite_names)} TFLite builtin operators:")
    print(", ".join(tflite_names))
    return 0


def targets(args: argparse.Namespace) -> int:
    from ..target import KINDS
    from ..target.describe import describe_all, describe_kind

    print(describe_kind(KINDS.get(args.kind)) if args.kind else describe_all())
    return 0
