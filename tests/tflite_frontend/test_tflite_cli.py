"""The command line takes .tflite files wherever it takes .onnx; --check compares with LiteRT."""

from __future__ import annotations

import shutil

from tessera.cli import main
from tessera.testing.litert import DATA, mlperf_tiny_path


def _cli(argv, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return code, out, err


def test_run_checks_a_tflite_model_against_litert(capsys):
    code, out, _ = _cli(["run", DATA / "ops" / "conv_2d.int8.tflite", "--check", "-q"], capsys)
    assert code == 0 and "CHECK OK" in out
    assert "max |tessera - LiteRT| = 0 " in out


def test_compiled_tarball_checks_on_a_board_with_its_embedded_tflite(tmp_path, capsys):
    tar = tmp_path / "kws.tar"
    assert _cli(["compile", mlperf_tiny_path("kws_ds_cnn"), "--executor", "aot", "-t", "c -mcpu=cortex-m4",
                 "-o", tar, "-q"], capsys)[0] == 0
    code, out, _ = _cli(["run", tar, "--board", "mps2-an386", "--check", "-q"], capsys)
    assert code == 0 and "CHECK OK" in out and "LiteRT" in out


def test_run_a_tflite_file_on_a_board(capsys):
    code, out, _ = _cli(["run", mlperf_tiny_path("ad_autoencoder"), "--board", "mps2-an386", "--check", "-q"],
                        capsys)
    assert code == 0 and "CHECK OK" in out


def test_other_suffixes_are_refused(tmp_path, capsys):
    model = tmp_path / "model.pb"
    shutil.copy(DATA / "ops" / "relu.float.tflite", model)
    code, _, err = _cli(["compile", model, "-o", tmp_path / "m.so", "-q"], capsys)
    assert code == 2
    assert "tessera compiles ONNX (.onnx) and TFLite (.tflite) models; got suffix '.pb'" in err


def test_input_shape_does_not_apply_to_tflite(tmp_path, capsys):
    code, _, err = _cli(["compile", DATA / "ops" / "relu.float.tflite", "-o", tmp_path / "m.so",
                         "--input-shape", "x:1,20", "-q"], capsys)
    assert code == 2 and "is a TFLite model, whose input shapes are fixed in the file" in err


def test_tune_takes_a_tflite_model(tmp_path, capsys):
    log = tmp_path / "tune.json"
    model = DATA / "ops" / "conv_2d.float.tflite"
    assert _cli(["tune", model, "-o", log, "--trials", "1", "--repeat", "1", "-q"], capsys)[0] == 0
    code, out, _ = _cli(["run", model, "--tuning-log", log, "--check", "-q"], capsys)
    assert code == 0 and "CHECK OK" in out


def test_ops_lists_the_tflite_operators(capsys):
    code, out, _ = _cli(["ops"], capsys)
    assert code == 0
    line = out.split("TFLite builtin operators:\n")[1].splitlines()[0]
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "SOFTMAX", "HARD_SWISH"} <= set(line.split(", "))
