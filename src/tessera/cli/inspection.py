"""`tessera compile`'s inspection flags: IR before/after passes, and timings.

    --print-ir-after FuseOps,LowerTE   one file per pass in --print-ir-dir
    --print-ir-before-all              before every pass
    --timings                          per-pass times and the C compiler's time per kernel

Pass names are those pass instruments see for the chosen target
(`tessera.backend.build_module.pipeline_pass_names`); an unknown name is
refused before the compile starts, with the valid names listed.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TesseraError, did_you_mean
from ..util.progress import C_COMPILATION, StepLog
from .flags import non_empty

if TYPE_CHECKING:  # the compiler is imported when the command compiles
    from ..backend.aot.library import AotLibrary
    from ..runtime.graph_library import GraphExecutorLibrary
    from ..transform.ir_dump import IRDumpInstrument
    from ..transform.pass_infra import PassInstrument, PassTimingInstrument

IR_DIR_SUFFIX = ".ir"  # default --print-ir-dir: the output's path plus this


def pass_list(text: str) -> list[str]:
    """`FuseOps,LowerTE` -> ["FuseOps", "LowerTE"] (argparse type; checked against a target later)."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected pass names separated by commas, e.g. FuseOps,LowerTE")
    return names


def add_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("inspection")
    g.add_argument("--print-ir-after", type=pass_list, action="extend", default=[], metavar="PASS[,PASS]",
                   help="write the IR after these passes, one file per pass, to --print-ir-dir; repeatable "
                        "(an unknown name lists the passes of the target)")
    g.add_argument("--print-ir-before", type=pass_list, action="extend", default=[], metavar="PASS[,PASS]",
                   help="write the IR before these passes, likewise")
    g.add_argument("--print-ir-after-all", action="store_true", help="write the IR after every pass")
    g.add_argument("--print-ir-before-all", action="store_true", help="write the IR before every pass")
    g.add_argument("--print-ir-dir", metavar="DIR", type=non_empty,
                   help=f"folder for the IR files, named NNN-after-PASS.txt in run order (default: the output's "
                        f"path plus {IR_DIR_SUFFIX}, e.g. model.so{IR_DIR_SUFFIX}/); dump files of an earlier run "
                        "there are replaced")
    g.add_argument("--timings", action="store_true",
                   help="print the time of every pass and the C compiler's time per kernel (each kernel "
                        "is compiled as a translation unit of its own; cached ones say so)")


def wants_ir(args: argparse.Namespace) -> bool:
    return bool(args.print_ir_after or args.print_ir_before or args.print_ir_after_all or args.print_ir_before_all)


def ir_folder(args: argparse.Namespace) -> Path:
    return Path(args.print_ir_dir) if args.print_ir_dir else Path(str(Path(args.output)) + IR_DIR_SUFFIX)


def check_pass_names(args: argparse.Namespace, valid: Sequence[str]) -> None:
    """Refuse a pass name the pipeline for this target does not run."""
    for flag, names in (("--print-ir-after", args.print_ir_after), ("--print-ir-before", args.print_ir_before)):
        for name in names:
            if name not in valid:
                raise TesseraError(f"{flag} {name}: no pass of that name{did_you_mean(name, valid)}; the passes "
                                   f"for this target, in run order: {', '.join(valid)}")


@dataclass
class Inspection:
    """The instruments and step log one `tessera compile` run needs for its flags."""

    timing: PassTimingInstrument | None = None
    steps: StepLog = field(default_factory=StepLog)
    dump: IRDumpInstrument | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Inspection":
        """The instruments for `args`; a pass name the target's pipeline lacks is an error."""
        from ..backend.build_module import pipeline_pass_names
        from ..transform.ir_dump import ALL_PASSES, IRDumpInstrument
        from ..transform.pass_infra import PassTimingInstrument

        if args.print_ir_dir and not wants_ir(args):
            raise TesseraError("--print-ir-dir: no IR to write; add --print-ir-after PASS (or --print-ir-before, "
                               "--print-ir-after-all, --print-ir-before-all)")
        if args.print_ir_after or args.print_ir_before:
            check_pass_names(args, pipeline_pass_names(args.target))
        dump = None
        if wants_ir(args):
            dump = IRDumpInstrument(ir_folder(args),
                                    before=ALL_PASSES if args.print_ir_before_all else args.print_ir_before,
                                    after=ALL_PASSES if args.print_ir_after_all else args.print_ir_after)
        return cls(PassTimingInstrument() if args.timings else None, StepLog(), dump)

    @property
    def config(self) -> dict[str, object]:
        """PassContext config for the flags: with --timings one kernel per translation unit, so that the
        C compiler's time of each kernel is measured on its own."""
        from ..codegen.c_host import KERNELS_PER_UNIT_CONFIG

        return {KERNELS_PER_UNIT_CONFIG: 1} if self.timing is not None else {}

    @property
    def instruments(self) -> list[PassInstrument]:
        return [i for i in (self.dump, self.timing) if i is not None]

    def print_results(self, lib: GraphExecutorLibrary | AotLibrary) -> None:
        """What the flags asked for, once `lib` is compiled."""
        from ..runtime.graph_library import GraphExecutorLibrary

        if self.dump is not None:
            count = len(self.dump.written)
            why = " (the passes named did not run: --opt-level turns some off)" if count == 0 else ""
            print(f"wrote {count} IR file{'' if count == 1 else 's'} to {self.dump.folder}/{why}")
        if self.timing is not None:
            print("pass timings:")
            print(self.timing.summary())
            module = lib.module if isinstance(lib, GraphExecutorLibrary) else None  # (AOT compiles no C)
            print(compiler_timings(self.steps, module.functions_by_unit() if module is not None else {}))


def compiler_timings(log: StepLog, functions: Mapping[str, Sequence[str]]) -> str:
    """The C compiler's time per translation unit, slowest first, cached units last. `tessera compile
    --timings` builds one kernel per unit, so a unit is named by its kernel; a unit of several kernels
    (a build with the default grouping) says how many it holds."""
    steps = log.of(C_COMPILATION)
    if not steps:
        return "C compiler: not run (the aot executor writes C source, compiled where it is built)"
    compiled = sorted((s for s in steps if not s.cached), key=lambda s: -s.seconds)
    cached = sorted((s for s in steps if s.cached), key=lambda s: s.name)

    def label(name: str) -> str:
        held = functions.get(name, ())
        if len(held) == 1:
            return f"{held[0]} ({name})"
        return f"{name} ({len(held)} kernels)" if held else name

    width = max(len(label(s.name)) for s in steps)
    lines = [f"C compiler, per translation unit ({len(compiled)} compiled, {len(cached)} cached, "
             f"{sum(s.seconds for s in compiled):.2f} s summed over units):"]
    lines += [f"  {label(s.name):<{width}} {s.seconds:>8.3f} s" for s in compiled]
    lines += [f"  {label(s.name):<{width}} {'cached':>10}" for s in cached]
    return "\n".join(lines)
