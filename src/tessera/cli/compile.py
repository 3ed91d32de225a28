"""`tessera compile`: ONNX to a shared library or a Model Library Format tarball."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..util.atomic import atomic_write_text
from .common import compile_onnx, model_name_for, parse_shapes, progress


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compile", help="compile an ONNX model",
        description="Compile MODEL.onnx. With the graph executor (default) the result is one shared library "
                    "holding the kernels, the graph and the weights (run it with `tessera run`). With "
                    "--executor aot it is standalone C in Model Library Format (a .tar, or a folder): "
                    "kernels, executor, header, weights, C runtime and metadata.json.")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("-o", "--output", required=True, help="output: model.so (graph) or model.tar / a folder (aot)")
    p.add_argument("-t", "--target", default="c",
                   help="target: e.g. 'c', 'c -mcpu=cortex-m7', or an alias such as 'blas' or 'onnxruntime' "
                        "(see `tessera targets`), or named pieces 'little: c -mcpu=cortex-m0; big: c -mcpu=cortex-m7' "
                        "(the first is the host); default c")
    p.add_argument("--executor", choices=("graph", "aot"), default="graph",
                   help="graph: a library run by tessera's graph executor; aot: standalone C (default graph)")
    p.add_argument("--mod-name", help="prefix of the generated C symbols, tsgen_<name>_ (aot; default: file name)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                   help="fix an input's shape (needed when the model has symbolic dimensions); repeatable")
    p.add_argument("--opt-level", type=int, default=2, choices=range(0, 4),
                   help="0 = one kernel per operator, >= 1 fuses and folds constants (default 2)")
    p.add_argument("--tuning-log", metavar="LOG.json",
                   help="use the schedules measured by `tessera tune` (kernels not in the log use defaults)")
    p.add_argument("--report", metavar="FILE.html",
                   help="print which operators went to which target and draw the graph coloured by target")
    p.add_argument("--memory-report", metavar="FILE.svg",
                   help="print the planned memory (peak, lower bounds, pools) and draw the pools over time")
    p.add_argument("--emit-c", metavar="DIR", help="also write the generated C sources to DIR (graph)")
    p.add_argument("--dump-ir", action="store_true", help="print the IR after fusion and lowering to stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    say = progress(args.quiet)
    mod_name = args.mod_name or (model_name_for(args.model) if args.executor == "aot" else "default")
    lib = compile_onnx(args.model, parse_shapes(args.input_shape), say, args.target, args.opt_level,
                       args.dump_ir, args.executor, mod_name, args.tuning_log)
    if args.report:
        from ..backend.report import partition_report

        report = partition_report(lib.partitioned_mod if args.executor == "aot" else lib)
        print(report.text())
        atomic_write_text(args.report, report.html(f"tessera: {Path(args.model).name} for {args.target}"))
        print(f"wrote {args.report}")
    if args.memory_report:
        from ..backend.memory_report import memory_report

        mem = memory_report(lib)
        print(mem.text())
        atomic_write_text(args.memory_report, mem.svg(f"tessera: {Path(args.model).name}, memory"))
        print(f"wrote {args.memory_report}")
    out = Path(args.output)
    say(f"exporting {out}")
    lib.export_library(out)
    if args.emit_c and args.executor == "graph":
        folder = Path(args.emit_c)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in lib.c_sources.items():
            atomic_write_text(folder / name, text)
        say(f"wrote generated C to {folder}/")
    if args.executor == "aot":
        meta = lib.metadata()
        pools = ", ".join(f"{p['name']} {p['size_bytes']} B" for p in meta["pools"])
        print(f"model {meta['model_name']}: weights {meta['params_bytes']} B, pools {pools} "
              f"(lower bound {meta['lower_bound_bytes']} B)")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.is_dir() else out.stat().st_size
    print(f"wrote {out} ({size} bytes)")
    return 0
