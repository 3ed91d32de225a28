"""Inspection flags of the command line (issue 19): --version, --print-ir-after/--print-ir-before,
--timings, progress bars on a terminal only, and `tessera ops` with opset ranges."""

from __future__ import annotations

import io
import platform
import re
from importlib.metadata import version
from pathlib import Path

import pytest

import tessera
from tessera.backend.build_module import optimize_pipeline, pipeline_pass_names
from tessera.cli import main
from tessera.cli.progress_bar import TerminalProgress, progress_bars, wants_bar
from tessera.frontend import from_onnx
from tessera.target.toolchain import SourceFile, Toolchain, link_shared_library
from tessera.transform import IRDumpInstrument, PassContext, PassInstrument, PassTimingInstrument, Sequential
from tessera.transform.fold_constant import FoldConstant
from tessera.transform.infer_type import InferType
from tessera.util.progress import C_COMPILATION, QEMU_RUNS, ProgressObserver, Step, StepLog, batch, observing

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"


def _cli(argv: list[object], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return code, out, err


# ------------------------------------------------------------------ --version

def test_version_prints_tessera_python_numpy_and_onnx(capsys):
    code, out, _ = _cli(["--version"], capsys)
    assert code == 0
    first, second = out.strip().splitlines()
    assert first == f"tessera {version('tessera')}"
    assert first.split()[1] == tessera.__version__  # the metadata and the package agree
    assert second == f"python {platform.python_version()}, numpy {version('numpy')}, onnx {version('onnx')}"


# ------------------------------------------------------------------ --print-ir-*

def test_print_ir_after_writes_one_file_per_pass_next_to_the_output(tmp_path, capsys):
    so = tmp_path / "digits.so"
    code, out, _ = _cli(["compile", DIGITS, "-o", so, "-q", "--print-ir-after", "FuseOps,LowerTE"], capsys)
    assert code == 0
    folder = tmp_path / "digits.so.ir"
    assert f"wrote 2 IR files to {folder}/" in out
    assert sorted(p.name for p in folder.iterdir()) == ["001-after-FuseOps.txt", "002-after-LowerTE.txt"]
    fused = (folder / "001-after-FuseOps.txt").read_text()
    assert fused.startswith("// after FuseOps\ndef @main(")
    assert "Primitive=1" in fused  # fused functions, not yet kernels
    lowered = (folder / "002-after-LowerTE.txt").read_text()
    # calls of loop kernels (a small map's convolution is nn.conv2d_blocked on AVX2 and AVX-512 hosts)
    assert re.search(r"@tsgen_default_fused_conv2d(_blocked)?_add_relu\(", lowered) and "for " in lowered


def test_print_ir_before_and_after_all_follow_the_pipeline(tmp_path, capsys):
    folder = tmp_path / "ir"
    code, _, _ = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "-q", "--print-ir-before-all",
                       "--print-ir-after-all", "--print-ir-dir", folder], capsys)
    assert code == 0
    names = sorted(p.name for p in folder.iterdir())
    parsed = [re.fullmatch(r"(\d{3})-(before|after)-(\w+)\.txt", n) for n in names]
    assert all(parsed)
    steps = [(m.group(2), m.group(3)) for m in parsed if m]
    assert [int(m.group(1)) for m in parsed if m] == list(range(1, len(names) + 1))  # numbered in run order
    valid = pipeline_pass_names("c")
    assert {name for _, name in steps} <= set(valid)
    # a Sequential brackets its passes: before optimize, then InferType, ..., after optimize
    assert steps[0] == ("before", "optimize") and steps[1] == ("before", "InferType")
    after_optimize = steps.index(("after", "optimize"))
    assert steps[after_optimize - 1] == ("after", optimize_pipeline().passes[-1].name)
    assert steps[-1] == ("after", "LiftWorkspaces")
    assert sum(w == "before" for w, _ in steps) == sum(w == "after" for w, _ in steps)


def test_print_ir_dir_replaces_an_earlier_dump_and_keeps_other_files(tmp_path, capsys):
    folder = tmp_path / "ir"
    argv = ["compile", DIGITS, "-o", tmp_path / "d.so", "-q", "--print-ir-dir", folder]
    assert _cli([*argv, "--print-ir-after-all"], capsys)[0] == 0
    (folder / "notes.txt").write_text("mine")
    assert _cli([*argv, "--print-ir-before", "FuseOps"], capsys)[0] == 0
    assert sorted(p.name for p in folder.iterdir()) == ["001-before-FuseOps.txt", "notes.txt"]


def test_an_unknown_pass_name_lists_the_passes_of_the_target(tmp_path, capsys):
    code, _, err = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "--print-ir-after", "FuseOp"], capsys)
    assert code == 2
    line = next(line for line in err.splitlines() if line.startswith("tessera: error:"))
    assert "--print-ir-after FuseOp: no pass of that name (did you mean 'FuseOps'?)" in line
    assert "in run order: optimize, InferType, DeadCodeElimination" in line and "LowerTE" in line
    assert not (tmp_path / "d.so").exists() and not (tmp_path / "d.so.ir").exists()  # refused before any work
    # an accelerator's passes are valid for its target only
    code, _, err = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "--print-ir-before", "LowerPartitions"], capsys)
    assert code == 2 and "--print-ir-before LowerPartitions: no pass of that name" in err
    code, _, _ = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "-t", "blas", "-q",
                       "--print-ir-before", "LowerPartitions"], capsys)
    assert code == 0 and (tmp_path / "d.so.ir" / "001-before-LowerPartitions.txt").is_file()


def test_a_pass_the_opt_level_turns_off_writes_nothing_and_says_why(tmp_path, capsys):
    code, out, _ = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "-q", "--opt-level", "0",
                         "--print-ir-after", "FoldConstant"], capsys)
    assert code == 0 and "wrote 0 IR files to" in out and "--opt-level turns some off" in out
    assert list((tmp_path / "d.so.ir").iterdir()) == []


def test_print_ir_dir_alone_is_refused(tmp_path, capsys):
    code, _, err = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "--print-ir-dir", tmp_path / "ir"], capsys)
    assert code == 2 and "tessera: error: --print-ir-dir: no IR to write; add --print-ir-after PASS" in err
    assert not (tmp_path / "d.so").exists()


@pytest.mark.parametrize("value", [",", "FuseOps,", ""])
def test_a_malformed_pass_list_is_an_argparse_error(value, tmp_path, capsys):
    code, _, err = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "--print-ir-after", value], capsys)
    assert code == 2 and "argument --print-ir-after: got" in err and "expected pass names" in err


class _Names(PassInstrument):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def run_before_pass(self, mod, pass_) -> None:
        self.seen.append(pass_.name)


@pytest.mark.parametrize("target, own", [("c", "RemovePins"), ("blas", "LowerPartitions"),
                                         ("little: c; big: c", "PlanDevices")])
def test_pipeline_pass_names_cover_every_pass_the_build_runs(target, own):
    mod, params = from_onnx(str(DIGITS))
    names = _Names()
    with PassContext(instruments=[names]) as ctx:
        tessera.build(mod, target=target, params=params, ctx=ctx)
    valid = pipeline_pass_names(target)
    assert set(names.seen) <= set(valid), set(names.seen) - set(valid)
    assert own in names.seen
    assert [n for n in valid if n in names.seen] == list(dict.fromkeys(names.seen))  # in run order


def test_dump_ir_keeps_printing_to_stderr(tmp_path, capsys):
    code, _, err = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "-q", "--dump-ir"], capsys)
    assert code == 0 and "// after FuseOps" in err and "// after LowerTE" in err
    assert not (tmp_path / "d.so.ir").exists()


def test_ir_dump_instrument_names_files_safely(tmp_path):
    mod, _ = from_onnx(str(DIGITS))
    seq = Sequential([InferType()], name="odd name/with:chars")
    dump = IRDumpInstrument(tmp_path, after=None)
    with PassContext(instruments=[dump]) as ctx:
        seq(mod, ctx)
    assert [p.name for p in dump.written] == ["001-after-InferType.txt", "002-after-odd_name_with_chars.txt"]


# ------------------------------------------------------------------ --timings

def _timing_lines(out: str) -> tuple[list[str], list[str]]:
    lines = out.splitlines()
    passes = lines[lines.index("pass timings:") + 1:]
    start = next(i for i, line in enumerate(passes) if line.startswith("C compiler"))
    return passes[:start], passes[start:]


def test_timings_print_every_pass_and_every_kernels_compile_time(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))  # cold: the compiler runs
    code, out, _ = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "-q", "--timings"], capsys)
    assert code == 0
    passes, compiler = _timing_lines(out)
    assert re.fullmatch(r"pass +ms +%", passes[0])
    rows = {line.strip().split()[0]: line for line in passes[1:]}
    assert {"optimize", "InferType", "FuseOps", "LowerTE", "LiftWorkspaces"} <= set(rows)
    assert rows["InferType"].startswith("  InferType") and rows["FuseOps"].startswith("FuseOps")  # nested indented
    top = [float(line.split()[-1]) for line in passes[1:] if not line.startswith(" ")]
    assert sum(top) == pytest.approx(100, abs=0.5)  # nested passes are not counted twice
    # --timings compiles each of the 7 kernels as a unit of its own, beside the graph and runtime sources and,
    # where the machine's schedules call the GEMM (AVX2: its convolutions are GEMMs; AVX-512: blocked loops),
    # the GEMM's library unit
    found = re.fullmatch(r"C compiler, per translation unit \((\d+) compiled, 0 cached, [\d.]+ s summed over units\):",
                         compiler[0])
    assert found
    units = {line.split()[0]: line.split()[1:] for line in compiler[1:1 + int(found[1])]}
    assert len(units) == int(found[1])
    kernels = {name: rest for name, rest in units.items() if name.startswith("tsgen_default_")}
    assert len(kernels) == 7 and all(re.fullmatch(r"\(kernels_\d\.c\)", rest[0]) for rest in kernels.values())
    assert {"tsgen_default_fused_conv2d_add_relu", "tsgen_default_fused_conv2d_blocked_add_relu"} & set(kernels)
    mod, params = from_onnx(str(DIGITS))
    has_library = any(name.endswith("_library.c") for name in tessera.build(mod, params=params, target="c").c_sources)
    assert any(name.endswith("_library.c") for name in units) == has_library
    assert units["graph_segments.c"][1:] == ["s"] and (not has_library or units["kernels_library.c"][1:] == ["s"])
    assert all(v[-1] == "s" and float(v[-2]) > 0 for v in units.values())
    # again: every unit comes from the object cache
    code, out, _ = _cli(["compile", DIGITS, "-o", tmp_path / "d.so", "-q", "--timings"], capsys)
    _, compiler = _timing_lines(out)
    assert f"(0 compiled, {len(units)} cached" in compiler[0]
    assert all(line.split()[-1] == "cached" for line in compiler[1:1 + len(units)])
    # the classifier's one row reads packed panels on AVX-512 only (gemm.prepacked_panel_width)
    names = {line.split()[0] for line in compiler[1:1 + len(units)]}
    assert {"tsgen_default_fused_matmul_add", "tsgen_default_fused_matmul_prepacked_add"} & names


def test_a_plain_compile_keeps_kernels_grouped_in_translation_units(tmp_path):
    """Only --timings splits kernels one per unit; a build keeps KERNELS_PER_UNIT together, and a bad
    setting of the config key is refused naming it."""
    import onnx

    import tessera
    from tessera.codegen.c_host import KERNELS_PER_UNIT_CONFIG
    from tessera.errors import TesseraError
    from tessera.frontend import from_onnx
    from tessera.transform import PassContext

    mod, params = from_onnx(onnx.load(DIGITS))
    lib = tessera.build(mod, target="c", params=params)
    assert lib.module is not None and [len(f) for f in lib.module.functions_by_unit().values() if f] == [7]
    with PassContext(config={KERNELS_PER_UNIT_CONFIG: 0}), pytest.raises(TesseraError, match=KERNELS_PER_UNIT_CONFIG):
        tessera.build(mod, target="c", params=params)


def test_timings_of_an_aot_compile_say_no_compiler_ran(tmp_path, capsys):
    code, out, _ = _cli(["compile", DIGITS, "-o", tmp_path / "d.tar", "-q", "--timings"], capsys)
    assert code == 0 and "LowerTE" in out
    assert "C compiler: not run (the aot executor writes C source" in out


def test_a_closed_stdout_pipe_loses_no_output_file(tmp_path):
    """`tessera compile ... --timings | head -3`: the reader may be gone before the first line. The library
    is written before anything is printed, and the command then ends quietly with status 0."""
    import subprocess
    import sys

    so = tmp_path / "digits.so"
    command = [sys.executable, "-m", "tessera", "compile", str(DIGITS), "-o", str(so), "-q", "--timings"]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout is not None and writer.stderr is not None
    writer.stdout.close()  # the reader goes away before tessera prints anything
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=300) == 0, err
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception ignored" not in err
    assert so.is_file() and so.stat().st_size > 0


def test_pass_timing_records_nesting():
    mod, _ = from_onnx(str(DIGITS))
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing]) as ctx:
        Sequential([InferType(), FoldConstant()], name="outer")(mod, ctx)
    assert [(r.name, r.depth) for r in timing.records] == [("outer", 0), ("InferType", 1), ("FoldConstant", 1)]
    assert [name for name, _ in timing.timings] == ["InferType", "FoldConstant", "outer"]  # finish order, as before
    assert timing.records[0].seconds >= timing.records[1].seconds + timing.records[2].seconds


# ------------------------------------------------------------------ progress

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = _cli(["compile", DIGITS, "-o", tmp_path / "d.so"], capsys)  # progress messages, no -q
    assert code == 0 and re.search(r"compiling \d+ C translation units", err)  # (5 or 6: the ISA decides)
    assert C_COMPILATION not in err and "\r" not in err and "\r" not in out
    assert not wants_bar(False, io.StringIO())


@pytest.mark.parametrize("quiet", [False, True])
def test_a_terminal_gets_a_bar_over_c_compilation_unless_quiet(quiet, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(["compile", str(DIGITS), "-o", str(tmp_path / "d.so"), *(["-q"] if quiet else [])]) == 0
    drawn = terminal.getvalue()
    if quiet:
        assert drawn == ""
    else:
        assert re.search(r"C compilation: +100%.*6/6", drawn), drawn
        assert "kernels_0.c" in drawn  # the unit that finished last is named


def test_overlapping_batches_of_one_kind_share_a_bar():
    terminal = _Terminal()
    bars = TerminalProgress(terminal)
    with observing(bars):
        with batch(C_COMPILATION, 2):
            with batch(C_COMPILATION, 3):  # e.g. a tuner's candidates, built at once
                assert bars._bars[C_COMPILATION].bar.total == 5
            assert C_COMPILATION in bars._bars  # still open
        assert bars._bars == {}
    assert "0/5" in terminal.getvalue()


def test_progress_bars_are_removed_after_the_command():
    with progress_bars(False, _Terminal()):
        from tessera.util import progress

        assert len(progress._current()) == 1
    assert progress._current() == ()


def test_compiler_runs_report_from_worker_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    units = [SourceFile(f"u{k}.c", f"int f{k}(void) {{ return {k}; }}\n") for k in range(4)]
    events: list[object] = []

    class Events(ProgressObserver):
        def batch_started(self, batch: str, total: int) -> None:
            events.append(("start", batch, total))

        def batch_finished(self, batch: str) -> None:
            events.append(("end", batch))

    log = StepLog()
    tc = Toolchain()
    with observing(log), observing(Events()):
        link_shared_library([(tc, u) for u in units], tmp_path / "a.so", tc, jobs=4)
        link_shared_library([(tc, u) for u in units], tmp_path / "b.so", tc, jobs=4)
    assert events == [("start", C_COMPILATION, 4), ("end", C_COMPILATION)] * 2
    steps = log.of(C_COMPILATION)
    assert sorted(s.name for s in steps[:4]) == [u.name for u in units] and not any(s.cached for s in steps[:4])
    assert all(s.cached for s in steps[4:]) and len(steps) == 8
    with batch(C_COMPILATION, 1):  # nobody listens any more: nothing recorded
        pass
    assert len(log.steps) == 8 and log.of(QEMU_RUNS) == []
    assert Step(QEMU_RUNS, "x", 0.0).cached is False


# ------------------------------------------------------------------ tessera ops

def test_ops_show_opset_ranges_and_the_microsoft_domain(capsys):
    from tessera.frontend.onnx.registry import CONVERTERS, HIGHEST_OPSET

    code, out, _ = _cli(["ops"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert re.fullmatch(r"\d+ operators of domain ai\.onnx \(opsets up to \d+\):", lines[0])
    rows = {line.split()[0]: line.split(None, 1)[1] for line in lines if line.startswith("  ")}
    top = HIGHEST_OPSET[""]
    assert rows["Relu"] == f"1-{top}"
    assert rows["Clip"] == f"1-{top}  (converters from opsets 1, 11)"
    assert rows["Resize"].startswith(f"10-{top}")
    assert "6 operators of domain com.microsoft (opsets up to 1):" in lines
    for name in CONVERTERS.op_types("com.microsoft"):
        assert rows[name] == "1"
    assert len(rows) == sum(len(CONVERTERS.op_types(d)) for d in CONVERTERS.domains())
    assert CONVERTERS.versions("Clip") == (1, 11) and CONVERTERS.versions("NoSuchOp") == ()
