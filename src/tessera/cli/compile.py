"""`tessera compile`: ONNX to a shared library or a Model Library Format tarball."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import TesseraError
from .artefacts import OUTPUT_RULE, TARBALL_SUFFIX, executor_for_output
from ..util.atomic import atomic_write_bytes, atomic_write_text
from ..util.progress import observing
from . import inspection
from .common import compile_onnx, model_name_for, parse_shapes, progress, runs_onnx_nodes
from .flags import add_load_flag, c_module_name, non_empty, target_string
from .paths import make_parent, readable_file, writable_file, writable_folder


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compile", help="compile an ONNX model",
        description="Compile MODEL.onnx. With the graph executor (-o model.so) the result is one shared library "
                    "holding the kernels, the graph and the weights (run it with `tessera run`). With the aot "
                    "executor (-o model.tar, or a folder) it is standalone C in Model Library Format: kernels, "
                    "executor, header, weights, C runtime and metadata.json. Without --executor the output's "
                    "suffix picks the executor: " + OUTPUT_RULE + ".")
    p.add_argument("model", help="path to an .onnx or .tflite file")
    p.add_argument("-o", "--output", required=True, type=non_empty,
                   help="output: model.so (graph executor) or model.tar / a folder (aot)")
    p.add_argument("-t", "--target", default="c", type=target_string,
                   help="target: e.g. 'c', 'c -mcpu=cortex-m7', or an alias such as 'blas' or 'onnxruntime' "
                        "(see `tessera targets`), or named pieces 'little: c -mcpu=cortex-m0; big: c -mcpu=cortex-m7' "
                        "(the first is the host); default c")
    p.add_argument("--executor", choices=("graph", "aot"), default=None,
                   help="graph: a library run by tessera's graph executor; aot: standalone C (default: from the "
                        "output's suffix, .so graph, .tar aot)")
    p.add_argument("--mod-name", type=c_module_name,
                   help="prefix of the generated C symbols, tsgen_<name>_ (aot; default: file name)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                   help="fix an input's shape (needed when the model has symbolic dimensions); repeatable")
    p.add_argument("--opt-level", type=int, default=2, choices=range(0, 4),
                   help="0 = one kernel per operator, >= 1 fuses and folds constants (default 2)")
    p.add_argument("--tuning-log", metavar="LOG.json", type=non_empty,
                   help="use the schedules measured by `tessera tune` (kernels not in the log use defaults)")
    p.add_argument("--report", metavar="FILE.html", type=non_empty,
                   help="print which operators went to which target and draw the graph coloured by target; "
                        "FILE.onnx writes the partitioned graph, annotated with targets, for Netron instead")
    p.add_argument("--memory-report", metavar="FILE.svg", type=non_empty,
                   help="print the planned memory (peak, lower bounds, pools) and draw the pools over time")
    p.add_argument("--emit-c", metavar="DIR", type=non_empty,
                   help="also write the generated C sources to DIR (graph; an aot export holds them already)")
    p.add_argument("--dump-ir", action="store_true",
                   help="print the IR after FuseOps and LowerTE to stderr (kept for scripts; "
                        "--print-ir-after FuseOps,LowerTE writes the same to files)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages or progress bars")
    inspection.add_flags(p)
    add_load_flag(p)
    p.set_defaults(func=run)


def _check_paths(args: argparse.Namespace, executor: str) -> None:
    """Every file the command reads or writes, before the compile starts."""
    readable_file("model", args.model)
    if executor == "aot" and not args.output.endswith(TARBALL_SUFFIX):
        writable_folder("-o", args.output)
    else:
        writable_file("-o", args.output)
    if args.report:
        writable_file("--report", args.report)
    if args.memory_report:
        writable_file("--memory-report", args.memory_report)
    if inspection.wants_ir(args):
        writable_folder("--print-ir-dir", str(inspection.ir_folder(args)))
    if args.emit_c:
        if executor == "aot":
            raise TesseraError("--emit-c writes the graph executor's C sources; an aot export already holds its "
                               "C (codegen/host/src in the Model Library Format output)")
        writable_folder("--emit-c", args.emit_c)


def _int8_bound(model: str, shapes: dict[str, tuple[int, ...]], target: str) -> int:
    """The model's int8 activation bound (0 without int8 layers), for the memory report."""
    from ..backend.int8_bound import int8_activation_bound
    from ..target import Target
    from ..target.named import is_named_targets, parse_named_targets
    from .model_files import import_model

    tgt = parse_named_targets(target) if is_named_targets(target) else Target(target)
    mod, params = import_model(model, shapes, opaque_unsupported=runs_onnx_nodes(tgt))
    return int8_activation_bound(mod, params)


def _write_reports(args: argparse.Namespace, lib: Any, shapes: dict[str, tuple[int, ...]]) -> str:
    """Write the --report and --memory-report files; returns their text summaries, to print afterwards."""
    from ..backend.aot.library import AotLibrary

    lines = []
    if args.report:
        from ..backend.report import partition_report

        report = partition_report(lib.partitioned_mod if isinstance(lib, AotLibrary) else lib)
        title = f"tessera: {Path(args.model).name} for {args.target}"
        if args.report.endswith(".onnx"):
            from ..backend.report_onnx import report_onnx

            atomic_write_bytes(make_parent(Path(args.report)), report_onnx(report).SerializeToString())
        else:
            atomic_write_text(make_parent(Path(args.report)), report.html(title))
        lines += [report.text(), f"wrote {args.report}"]
    if args.memory_report:
        from ..backend.memory_report import memory_report

        mem = memory_report(lib, _int8_bound(args.model, shapes, args.target))
        atomic_write_text(make_parent(Path(args.memory_report)), mem.svg(f"tessera: {Path(args.model).name}, memory"))
        lines += [mem.text(), f"wrote {args.memory_report}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    executor = executor_for_output(args.output, args.executor)
    _check_paths(args, executor)
    shapes = parse_shapes(args.input_shape)
    say = progress(args.quiet)
    mod_name = args.mod_name or (model_name_for(args.model) if executor == "aot" else "default")
    seen = inspection.Inspection.from_args(args)  # refuses an unknown pass name before the compile
    with observing(seen.steps):
        lib = compile_onnx(args.model, shapes, say, args.target, args.opt_level, args.dump_ir, executor, mod_name,
                           args.tuning_log, seen.instruments, seen.config)
    from ..backend.aot.library import AotLibrary  # (imported by the compile already)

    # every file is written before anything is printed: a closed pipe (`| head`) must not lose the output
    out = Path(args.output)
    say(f"exporting {out}")
    lib.export_library(out)
    if args.emit_c and not isinstance(lib, AotLibrary):  # (_check_paths refuses --emit-c for aot)
        folder = Path(args.emit_c)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in lib.c_sources.items():
            atomic_write_text(folder / name, text)
        say(f"wrote generated C to {folder}/")
    reports = _write_reports(args, lib, shapes)
    seen.print_results(lib)
    if reports:
        print(reports)
    if isinstance(lib, AotLibrary):
        meta = lib.metadata()
        pools = ", ".join(f"{p['name']} {p['size_bytes']} B" for p in meta["pools"])
        print(f"model {meta['model_name']}: weights {meta['params_bytes']} B, pools {pools} "
              f"(lower bound {meta['lower_bound_bytes']} B)")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.is_dir() else out.stat().st_size
    print(f"wrote {out} ({size} bytes)")
    return 0
