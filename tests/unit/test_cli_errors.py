"""The `tessera` command line refuses bad flags and files with one line, never a traceback (issue 14, item 7).

Exit status: 2 for every error (argparse's and tessera's), 1 only for a --check mismatch.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.cli import main


def _model(path: Path, names: tuple[str, ...] = ("a", "b"), shape: tuple[int, ...] = (2, 3),
           dtype: int = TensorProto.FLOAT, outputs: int = 1) -> Path:
    """y = sum of the inputs (Identity for one input); `outputs` copies of it."""
    op = "Identity" if len(names) == 1 else "Sum"
    nodes = [helper.make_node(op, list(names), ["y"])]
    nodes += [helper.make_node("Identity", ["y"], [f"y{k}"]) for k in range(1, outputs)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, dtype, list(shape)) for n in names],
        [helper.make_tensor_value_info("y", dtype, list(shape))]
        + [helper.make_tensor_value_info(f"y{k}", dtype, list(shape)) for k in range(1, outputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return code, out, err


def _error(argv: list[str], capsys) -> str:
    """The one error line of a command that must fail with exit status 2."""
    code, _, err = _cli(argv, capsys)
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert code == 2 and len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def add_so(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("add")
    model = _model(folder / "add.onnx")
    assert main(["compile", str(model), "-o", str(folder / "add.so"), "-q"]) == 0
    return folder / "add.so"


# ---------------------------------------------------------------- paths given to the loader


def test_run_a_bare_library_name_from_the_current_folder(add_so, tmp_path, monkeypatch, capsys):
    shutil.copy(add_so, tmp_path / "model.so")
    monkeypatch.chdir(tmp_path)
    code, out, _ = _cli(["run", "model.so", "--random-input", "-q"], capsys)
    assert code == 0 and "output 0: shape (2, 3) float32" in out


def test_a_file_named_like_a_system_library_is_the_one_loaded(add_so, tmp_path, monkeypatch, capsys):
    shutil.copy(add_so, tmp_path / "libm.so.6")  # dlopen("libm.so.6") would find the system's libm
    monkeypatch.chdir(tmp_path)
    code, out, _ = _cli(["run", "libm.so.6", "--random-input", "-q"], capsys)
    assert code == 0 and "output 0: shape (2, 3) float32" in out
    lib = tessera.load_module("libm.so.6")  # the Python API resolves the name the same way
    ones = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(tessera.GraphModule(lib)(ones, ones)[0], 2 * ones)


# ---------------------------------------------------------------- input files


def _write_inputs(folder: Path) -> dict[str, Path]:
    good = folder / "good.npy"
    np.save(good, np.ones((2, 3), np.float32))
    np.savez(folder / "good.npz", a=np.ones((2, 3), np.float32))
    files = {
        "garbage": folder / "garbage.npy", "empty": folder / "empty.npy", "truncated": folder / "truncated.npy",
        "truncated_npz": folder / "truncated.npz", "no_arrays": folder / "none.npz", "two_arrays": folder / "two.npz",
        "shape": folder / "shape.npy", "dtype": folder / "dtype.npy", "pickle": folder / "pickle.npy",
    }
    files["garbage"].write_bytes(b"this is not numpy\n")
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(good.read_bytes()[:100])
    files["truncated_npz"].write_bytes((folder / "good.npz").read_bytes()[:100])
    np.savez(files["no_arrays"])
    np.savez(files["two_arrays"], p=np.ones((2, 3), np.float32), q=np.ones((2, 3), np.float32))
    np.save(files["shape"], np.ones((3, 2), np.float32))
    np.save(files["dtype"], np.ones((2, 3), np.complex64))
    np.save(files["pickle"], np.array([{"x": 1}], dtype=object), allow_pickle=True)
    return files


@pytest.mark.parametrize("kind, message", [
    ("garbage", "garbage.npy is not a NumPy file; expected a .npy file (numpy.save) or a .npz file"),
    ("empty", "empty.npy is empty; expected a .npy file"),
    ("truncated", "truncated.npy is damaged or truncated"),
    ("truncated_npz", "truncated.npz is damaged or truncated"),
    ("no_arrays", "none.npz holds no arrays; expected one array, or one named 'a'"),
    ("two_arrays", "two.npz holds p, q; expected one array, or one named 'a'"),
    ("shape", "shape.npy holds shape (3, 2), input 'a' takes (2, 3)"),
    ("dtype", "dtype.npy holds complex64, input 'a' takes float32"),
    ("pickle", "pickle.npy is damaged or truncated (Object arrays cannot be loaded when allow_pickle=False)"),
])
def test_bad_input_files_are_refused_naming_the_file(add_so, tmp_path, kind, message, capsys):
    file = _write_inputs(tmp_path)[kind]
    line = _error(["run", add_so, "--input", f"a={file}", "--random-input", "-q"], capsys)
    assert line.startswith(f"tessera: error: --input 'a={file}': ") and message in line


def test_input_file_that_is_missing_or_a_folder(add_so, tmp_path, capsys):
    assert "no such file, expected a .npy or .npz file" in _error(
        ["run", add_so, "--input", f"a={tmp_path / 'nope.npy'}", "--random-input", "-q"], capsys)
    assert "is a folder, expected a .npy or .npz file" in _error(
        ["run", add_so, "--input", f"a={tmp_path}", "--random-input", "-q"], capsys)


def test_input_names_are_checked(add_so, tmp_path, capsys):
    _write_inputs(tmp_path)
    good = tmp_path / "good.npy"
    assert "the model has no input 'zz'; inputs: 'a' (2, 3) float32, 'b' (2, 3) float32" in _error(
        ["run", add_so, "--input", f"zz={good}", "--random-input", "-q"], capsys)
    assert "input 'a' is given twice" in _error(
        ["run", add_so, "--input", f"a={good}", "--input", f"a={good}", "--random-input", "-q"], capsys)
    assert "name the input (NAME=FILE)" in _error(["run", add_so, "--input", str(good), "-q"], capsys)
    code, out, _ = _cli(["run", add_so, "--input", f"a={good}", "--input", f"b={tmp_path / 'good.npz'}", "-q"],
                        capsys)
    assert code == 0 and "[2, 2, 2, 2, 2, 2]" in out


# ---------------------------------------------------------------- output paths


def test_output_paths_that_are_folders_are_refused_before_any_work(add_so, tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    folder = tmp_path / "taken.so"
    folder.mkdir()
    assert f"-o {folder}: is a folder, expected a file name" in _error(["compile", model, "-o", folder, "-q"], capsys)
    assert "--report" in _error(["compile", model, "-o", tmp_path / "x.so", "--report", tmp_path, "-q"], capsys)
    assert "--memory-report" in _error(
        ["compile", model, "-o", tmp_path / "x.so", "--memory-report", tmp_path, "-q"], capsys)
    assert f"-o {tmp_path}: is a folder" in _error(["tune", model, "-o", tmp_path, "-q"], capsys)
    npz_folder = tmp_path / "out.npz"
    npz_folder.mkdir()
    assert "--output" in _error(["run", add_so, "--random-input", "--output", npz_folder, "-q"], capsys)
    assert not (tmp_path / "x.so").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert f"{blocker} is a file, not a folder" in _error(["compile", model, "-o", blocker / "x.so", "-q"], capsys)
    assert "--emit-c" in _error(["compile", model, "-o", tmp_path / "x.so", "--emit-c", blocker, "-q"], capsys)


def test_run_output_must_be_npz(add_so, tmp_path, capsys):
    # numpy.savez would append .npz, and the command said it wrote the name given
    assert "name the file FILE.npz" in _error(
        ["run", add_so, "--random-input", "--output", tmp_path / "out", "-q"], capsys)
    code, out, _ = _cli(["run", add_so, "--random-input", "--output", tmp_path / "sub" / "out.npz", "-q"], capsys)
    assert code == 0 and np.load(tmp_path / "sub" / "out.npz")["arr_0"].shape == (2, 3)


# ---------------------------------------------------------------- --input-shape


@pytest.mark.parametrize("spec, message", [
    ("a:-1,3", "got (-1, 3), dimensions must be integers >= 0"),
    ("a:2,x", "dimensions must be integers >= 0"),
    ("a2,3", "expected NAME:D1,D2,..."),
])
def test_malformed_input_shapes(tmp_path, spec, message, capsys):
    model = _model(tmp_path / "m.onnx")
    for argv in (["compile", model, "-o", tmp_path / "x.so"], ["run", model, "--random-input"]):
        assert message in _error([*argv, "--input-shape", spec, "-q"], capsys)


def test_input_shape_names_are_checked(add_so, tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    assert "shape given for unknown input(s) ['c']; inputs: ['a', 'b']" in _error(
        ["run", model, "--input-shape", "c:2,3", "--random-input", "-q"], capsys)
    assert "input 'a' is given twice" in _error(
        ["compile", model, "-o", tmp_path / "x.so", "--input-shape", "a:2,3", "--input-shape", "a:4,3", "-q"],
        capsys)
    # a compiled module has fixed shapes: --input-shape was silently ignored
    assert "--input-shape applies when MODULE is an .onnx file" in _error(
        ["run", add_so, "--input-shape", "c:2,3", "--random-input", "-q"], capsys)


def test_input_shape_for_a_weight_listed_as_an_input_is_refused(tmp_path, capsys):
    """Older exporters list initializers among the inputs; their shapes come from their data."""
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3)),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, (2, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))], [w])
    path = tmp_path / "old.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    message = _error(["run", str(path), "--input-shape", "w:5,5", "--random-input", "-q"], capsys)
    assert "shape given for unknown input(s) ['w'] (w: values stored in the model, their shapes are fixed)" in message
    assert "inputs: ['x']" in message


# ---------------------------------------------------------------- counts, names and other flag values


@pytest.mark.parametrize("argv, message", [
    (["run", "{so}", "--random-input", "--repeat", "0"], "argument --repeat: got 0, expected an integer >= 1"),
    (["run", "{so}", "--random-input", "--repeat", "-2"], "argument --repeat: got -2, expected an integer >= 1"),
    (["run", "{so}", "--random-input", "--seed", "-1"], "argument --seed: got -1, expected an integer >= 0"),
    (["run", "{onnx}", "--random-input", "--board", ""],
     "argument --board: got an empty string, expected one of: mps2-an385, mps2-an386, mps2-an500, mps3-an547"),
    (["run", "{onnx}", "--random-input", "--board", "mps2"], "unknown board 'mps2'; valid boards: mps2-an385"),
    (["run", "{onnx}", "--random-input", "-t", " "], "argument -t/--target: got an empty string"),
    (["run", "", "--random-input"], "argument module: got an empty string"),
    (["run", "{so}", "--random-input", "--compare-onnx", ""], "argument --compare-onnx: got an empty string"),
    (["compile", "{onnx}", "-o", ""], "argument -o/--output: got an empty string"),
    (["compile", "{onnx}", "-o", "{tmp}/x.so", "-t", ""], "argument -t/--target: got an empty string"),
    (["compile", "{onnx}", "-o", "{tmp}/x.so", "--mod-name", ""], "argument --mod-name: got an empty string"),
    (["compile", "{onnx}", "-o", "{tmp}/x.so", "--mod-name", "a b"], "mod_name 'a b' must be a C identifier"),
    (["compile", "{onnx}", "-o", "{tmp}/x.so", "--opt-level", "7"], "argument --opt-level: invalid choice: 7"),
    (["tune", "{onnx}", "-o", "{tmp}/log.json", "--trials", "0"], "argument --trials: got 0, expected an integer"),
    (["tune", "{onnx}", "-o", "{tmp}/log.json", "--threads", "0"], "argument --threads: got 0, expected an integer"),
    (["tune", "{onnx}", "-o", "{tmp}/log.json", "--repeat", "0"], "argument --repeat: got 0, expected an integer"),
    (["tune", "{onnx}", "-o", "{tmp}/log.json", "--budget", "-1"], "argument --budget: got -1, expected a finite"),
    (["tune", "{onnx}", "-o", "{tmp}/log.json", "--budget", "nan"], "argument --budget: got nan, expected a finite"),
    (["tune", "{onnx}", "-o", "{tmp}/log.json", "--budget", "0"], "argument --budget: got 0, expected a finite"),
    (["tune", "{onnx}", "-o", ""], "argument -o/--output: got an empty string"),
    (["targets", ""], "argument kind: got an empty string"),
])
def test_flag_values_are_validated(add_so, tmp_path, argv, message, capsys):
    model = _model(tmp_path / "m.onnx")
    argv = [a.format(so=add_so, onnx=model, tmp=tmp_path) for a in argv]
    assert message in _error([*argv, "-q"] if argv[0] != "targets" else argv, capsys)
    assert not (tmp_path / "log.json").exists() and not (tmp_path / "x.so").exists()


def test_files_to_read_are_checked(add_so, tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    assert "--tuning-log" in _error(["compile", model, "-o", tmp_path / "x.so", "--tuning-log", tmp_path, "-q"],
                                    capsys)
    assert f"--compare-onnx {tmp_path / 'no.onnx'}: no such file" in _error(
        ["run", add_so, "--random-input", "--compare-onnx", tmp_path / "no.onnx", "-q"], capsys)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xfe not a model")
    assert f"--compare-onnx {garbage}: cannot read it as an ONNX model" in _error(
        ["run", add_so, "--random-input", "--compare-onnx", garbage, "-q"], capsys)
    assert f"model {tmp_path / 'none.onnx'}: no such file" in _error(
        ["compile", tmp_path / "none.onnx", "-o", tmp_path / "x.so", "-q"], capsys)


@pytest.mark.parametrize("argv, message", [
    (["run", "{so}", "--random-input", "-t", "c"], "-t applies when MODULE is an .onnx file"),
    (["run", "{so}", "--random-input", "--tuning-log", "{tmp}/log.json"], "--tuning-log applies when MODULE"),
    (["run", "{so}", "--check"], "--check: {so} holds no ONNX model; pass --compare-onnx MODEL.onnx"),
    (["run", "{so}", "--random-input", "--executor", "aot"], "--executor aot: {so} is a graph-executor library"),
    (["run", "{so}", "--random-input", "--board", "mps2-an386"], "--board mps2-an386: {so} is a graph-executor"),
    (["run", "{onnx}", "--random-input", "--executor", "graph", "--board", "mps2-an386"],
     "--board runs AOT-compiled C"),
    (["run", "{onnx}", "--random-input", "--executor", "aot", "--repeat", "5"],
     "--repeat 5 times the graph executor; the aot executor runs once"),
    (["run", "{tar}", "--random-input", "--executor", "graph"], "{tar} is Model Library Format, which the AOT "
     "executor runs; drop --executor graph"),
    (["run", "{tmp}/missing.so"], "no such library: {tmp}/missing.so"),
    (["run", "{tmp}/missing.tar"], "no such Model Library Format tarball or folder"),
])
def test_flags_that_do_not_fit_the_module(add_so, tmp_path, argv, message, capsys):
    model = _model(tmp_path / "m.onnx")
    fill = {"so": add_so, "onnx": model, "tmp": tmp_path, "tar": tmp_path / "m.tar"}
    (tmp_path / "m.tar").write_bytes(b"")  # refused by its name before it is read
    argv = [a.format(**fill) for a in argv]
    assert message.format(**fill) in _error([*argv, "-q"], capsys)


# ---------------------------------------------------------------- output suffix and executor


def test_output_suffix_must_match_the_executor(tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    assert "the graph executor writes a shared library, so the output must end in .so" in _error(
        ["compile", model, "--executor", "graph", "-o", tmp_path / "x.tar", "-q"], capsys)
    assert "--executor aot writes Model Library Format, a .tar file or a folder" in _error(
        ["compile", model, "--executor", "aot", "-o", tmp_path / "x.so", "-q"], capsys)
    assert "cannot tell the executor from the name; name it model.so (graph executor) or model.tar" in _error(
        ["compile", model, "-o", tmp_path / "folder", "-q"], capsys)
    assert "--emit-c writes the graph executor's C sources" in _error(
        ["compile", model, "-o", tmp_path / "x.tar", "--emit-c", tmp_path / "c", "-q"], capsys)
    assert not any(tmp_path.glob("x.*")) and not (tmp_path / "folder").exists()


def test_output_suffix_picks_the_executor(tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    assert _cli(["compile", model, "-o", tmp_path / "m.tar", "-q"], capsys)[0] == 0
    with tarfile.open(tmp_path / "m.tar") as tar:
        assert "metadata.json" in tar.getnames()
    assert _cli(["compile", model, "-o", tmp_path / "m.so", "-q"], capsys)[0] == 0
    assert (tmp_path / "m.so").read_bytes()[:4] == b"\x7fELF"
    assert _cli(["compile", model, "--executor", "aot", "-o", tmp_path / "mlf", "-q"], capsys)[0] == 0
    assert (tmp_path / "mlf" / "metadata.json").is_file()


# ---------------------------------------------------------------- --compare-onnx with another model


@pytest.mark.parametrize("other, message", [
    (dict(names=("a",)), "takes 1 inputs (a), the module 2 ('a' (2, 3) float32, 'b' (2, 3) float32)"),
    (dict(shape=(3, 2)), "input 0 'a' is declared (3, 2) float32, the module's input 0 is 'a' (2, 3) float32"),
    (dict(dtype=TensorProto.DOUBLE), "input 0 'a' is declared (2, 3) float64"),
    (dict(outputs=2), "has 2 outputs, the module 1"),
])
def test_compare_onnx_with_a_different_model(add_so, tmp_path, other, message, capsys):
    reference = _model(tmp_path / "other.onnx", **other)
    line = _error(["run", add_so, "--random-input", "--compare-onnx", reference, "-q"], capsys)
    assert f"--compare-onnx {reference}" in line and message in line


def test_compare_onnx_with_the_same_model_passes(add_so, tmp_path, capsys):
    code, out, _ = _cli(["run", add_so, "--check", "--compare-onnx", _model(tmp_path / "m.onnx"), "-q"], capsys)
    assert code == 0 and "CHECK OK" in out


# ---------------------------------------------------------------- -t onnxruntime falls back as the API does


def _needs_fallback(path: Path) -> Path:
    """Det: an operator tessera does not implement and onnxruntime does (after a tunable Conv)."""
    weight = onnx.numpy_helper.from_array(np.full((3, 1, 3, 3), 0.1, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Det", ["r"], ["y"])], "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_onnxruntime_target_falls_back_for_missing_operators(tmp_path, capsys):
    model = _needs_fallback(tmp_path / "det.onnx")
    assert "Det" in _error(["compile", model, "-o", tmp_path / "c.so", "-q"], capsys)  # plain C: refused
    assert _cli(["compile", model, "-t", "onnxruntime", "-o", tmp_path / "ort.so", "-q"], capsys)[0] == 0
    code, out, _ = _cli(["run", tmp_path / "ort.so", "--check", "--compare-onnx", model, "-q"], capsys)
    assert code == 0 and "CHECK OK" in out
    code, out, _ = _cli(["run", model, "-t", "onnxruntime", "--check", "-q"], capsys)
    assert code == 0 and "CHECK OK" in out
    log = tmp_path / "log.json"
    code, out, _ = _cli(["tune", model, "-t", "onnxruntime", "-o", log, "--trials", "1", "--repeat", "1", "-q"], capsys)
    assert code == 0 and "1 tunable kernels, 1 configurations measured" in out and log.is_file()


# ---------------------------------------------------------------- --random-input fills every input


def test_random_input_fills_inputs_whose_names_collide_after_clean_up(tmp_path, capsys):
    # "a b" becomes "a_b" in the module, like the second input: by name one of them stayed zero
    model = _model(tmp_path / "clash.onnx", names=("a b", "a_b"))
    assert _cli(["compile", model, "-o", tmp_path / "clash.so", "-q"], capsys)[0] == 0
    out_file = tmp_path / "y.npz"
    assert _cli(["run", tmp_path / "clash.so", "--random-input", "--output", out_file, "-q"], capsys)[0] == 0
    rng = np.random.default_rng(0)
    first, second = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(np.load(out_file)["arr_0"], first + second)
    code, out, _ = _cli(["run", model, "--check", "-q"], capsys)  # onnxruntime is fed the model's own names
    assert code == 0 and "CHECK OK" in out


def test_inputs_are_named_as_in_the_onnx_model(tmp_path, capsys):
    model = _model(tmp_path / "clash.onnx", names=("a b", "a_b"))
    np.save(tmp_path / "one.npy", np.ones((2, 3), np.float32))
    np.save(tmp_path / "two.npy", np.full((2, 3), 2, np.float32))
    code, out, _ = _cli(["run", model, "--input", f"a b={tmp_path / 'one.npy'}",
                         "--input", f"a_b={tmp_path / 'two.npy'}", "-q"], capsys)
    assert code == 0 and "[3, 3, 3, 3, 3, 3]" in out
    assert _cli(["compile", model, "-o", tmp_path / "clash.so", "-q"], capsys)[0] == 0
    # the compiled module keeps the model's own names: 'a_b' is one input, and 'a b' still needs a value
    assert "no value for input 'a b'" in _error(
        ["run", tmp_path / "clash.so", "--input", f"a_b={tmp_path / 'one.npy'}", "-q"], capsys)
    code, out, _ = _cli(["run", tmp_path / "clash.so", "--input", f"a b={tmp_path / 'one.npy'}",
                         "--input", f"a_b={tmp_path / 'two.npy'}", "-q"], capsys)
    assert code == 0 and "[3, 3, 3, 3, 3, 3]" in out


@pytest.mark.parametrize("executor", ["graph", "aot"])
def test_random_integer_inputs_are_not_mostly_zero(tmp_path, executor, capsys):
    # standard-normal values cast to int32 are zero two times in three
    model = _model(tmp_path / "ints.onnx", names=("i",), shape=(64,), dtype=TensorProto.INT32)
    out_file = tmp_path / "y.npz"
    code, _, _ = _cli(["run", model, "--executor", executor, "--random-input", "--output", out_file, "-q"], capsys)
    values = np.load(out_file)["arr_0"]
    assert code == 0 and values.dtype == np.int32
    assert np.count_nonzero(values) > 0.8 * values.size and values.min() >= 0 and values.max() <= 15
    bools = _model(tmp_path / "bools.onnx", names=("m",), shape=(64,), dtype=TensorProto.BOOL)
    assert _cli(["run", bools, "--executor", executor, "--random-input", "--output", out_file, "-q"], capsys)[0] == 0
    assert 0 < np.count_nonzero(np.load(out_file)["arr_0"]) < 64


def test_missing_input_names_the_input_in_onnx_terms(tmp_path, capsys):
    model = _model(tmp_path / "clash.onnx", names=("a b", "a_b"))
    assert "no value for input 'a b'; pass --input a b=FILE.npy or --random-input" in _error(
        ["run", model, "-q"], capsys)


def test_help_states_the_exit_status_and_the_suffix_rule(capsys):
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 on success, 1 when `run --check` finds a mismatch, 2 on an error" in text
    assert main(["compile", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "model.so is a shared library for the graph executor, model.tar Model Library Format" in text


def test_interrupts_and_os_errors_are_one_line(monkeypatch, capsys):
    from tessera.cli import info

    def interrupted(args):
        raise KeyboardInterrupt

    def disk_full(args):
        raise OSError(28, "No space left on device", "out.so")

    monkeypatch.setattr(info, "ops", interrupted)
    assert main(["ops"]) == 130
    assert capsys.readouterr().err == "tessera: interrupted\n"
    monkeypatch.setattr(info, "ops", disk_full)
    assert main(["ops"]) == 2
    assert capsys.readouterr().err == "tessera: error: [Errno 28] No space left on device: 'out.so'\n"
