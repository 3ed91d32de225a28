"""The `tessera` command line, exported libraries and importer errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.cli import main
from tessera.errors import ConversionError, UnsupportedOperatorError
from tessera.frontend import from_onnx
from tessera.runtime.params_blob import load_params, save_params

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"


def _digit() -> np.ndarray:
    data = np.load(ROOT / "examples" / "digits" / "digits_heldout.npz")
    return data["images"][:1].reshape(1, 1, 8, 8).astype(np.float32), int(data["labels"][0])


def test_compile_then_run_from_the_command_line(tmp_path, capsys):
    so = tmp_path / "digits.so"
    assert main(["compile", str(DIGITS), "-o", str(so), "--emit-c", str(tmp_path / "gen"), "-q"]) == 0
    assert so.is_file() and list((tmp_path / "gen").glob("*.c"))
    x, label = _digit()
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(so), "--input", f"image={tmp_path / 'x.npy'}", "--compare-onnx", str(DIGITS), "-q"]) == 0
    out = capsys.readouterr().out
    assert f"argmax={label}" in out
    diff = float(out.split("max |tessera - onnxruntime| = ")[1].split()[0])
    assert diff < 1e-4


def test_compile_for_named_pieces_from_the_command_line(tmp_path, capsys):
    so, tar = tmp_path / "digits.so", tmp_path / "digits.tar"
    assert main(["compile", str(DIGITS), "-o", str(so), "-t", "little: c; big: c", "-q"]) == 0
    x, label = _digit()
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(so), "--input", f"image={tmp_path / 'x.npy'}", "-q"]) == 0
    assert f"argmax={label}" in capsys.readouterr().out
    assert main(["compile", str(DIGITS), "-o", str(tar), "-t", "m4: c -mcpu=cortex-m4; m7: c -mcpu=cortex-m7",
                 "-q"]) == 0
    assert f"wrote {tar}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", "missing.so"], "no such library"),
    (["compile", str(DIGITS), "-o", "/tmp/x.so", "--input-shape", "image=1,1,8,8"], "expected NAME:D1,D2"),
    (["compile", str(DIGITS), "-o", "/tmp/x.so", "--input-shape", "img:1,1,8,8"], "unknown input"),
    (["targets", "cuda"], "unknown target kind 'cuda'"),
    (["tune", str(DIGITS), "-o", "/tmp/x.json", "-t", "a: c; b: c"], "measures one target at a time"),
])
def test_cli_errors_are_one_line_messages(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    error_lines = [line for line in err.splitlines() if line.startswith("tessera: error:")]
    assert len(error_lines) == 1 and message in error_lines[0]
    assert "Traceback" not in err


def test_run_needs_inputs_or_random(tmp_path, capsys):
    so = tmp_path / "d.so"
    main(["compile", str(DIGITS), "-o", str(so), "-q"])
    assert main(["run", str(so), "-q"]) == 2
    assert "no value for input 'image'" in capsys.readouterr().err
    assert main(["run", str(so), "--random-input", "--repeat", "3", "-q"]) == 0
    assert "latency: median" in capsys.readouterr().out


def test_exported_library_is_self_contained(tmp_path):
    mod, params = from_onnx(str(DIGITS))
    lib = tessera.build(mod, params=params)
    path = lib.export_library(tmp_path / "m.so")
    loaded = tessera.load_module(path)
    x, _ = _digit()
    np.testing.assert_array_equal(tessera.GraphModule(loaded)(x)[0], lib(x)[0])
    gm = tessera.GraphModule(loaded)
    with pytest.raises(tessera.TesseraError, match="input 'image': got shape \\(1, 8, 8\\), expected \\(1, 1, 8, 8\\)"):
        gm.set_input("image", x[0])
    with pytest.raises(tessera.TesseraError, match="no input 'imag' \\(did you mean 'image'\\?\\)"):
        gm.set_input("imag", x)


def test_params_blob_round_trip():
    params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.array([1, -2], np.int64),
              "s": np.array(3.5, np.float64)}
    back = load_params(save_params(params))
    assert set(back) == set(params)
    for k in params:
        np.testing.assert_array_equal(back[k], params[k])
        assert back[k].dtype == params[k].dtype


def _model(node: onnx.NodeProto, opset: int = 13, dim: object = 4) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_operator_names_node_type_and_opset():
    model = _model(helper.make_node("FancyOp", ["x"], ["y"], name="fancy1"), opset=17)
    with pytest.raises(UnsupportedOperatorError, match=r"node 'fancy1': operator FancyOp \(opset 17\) is not supported.*Supported operators: .*Conv"):
        from_onnx(model)


def test_undefined_tensor_and_symbolic_dims_are_explained():
    model = _model(helper.make_node("Relu", ["nope"], ["y"], name="r"))
    with pytest.raises(ConversionError, match="node 'r' \\(Relu\\) reads 'nope', which no earlier node"):
        from_onnx(model)
    model = _model(helper.make_node("Relu", ["x"], ["y"], name="r"), dim="batch")
    with pytest.raises(ConversionError, match="symbolic dimension 'batch'.*shape="):
        from_onnx(model)
    mod, _ = from_onnx(model, shape={"x": (4,)})
    assert str(mod.main.params[0].type_annotation) == "Tensor[(4,), float32]"


def test_bad_attribute_value_is_reported_with_the_node():
    node = helper.make_node("Conv", ["x", "x"], ["y"], name="c1", auto_pad="SIDEWAYS")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ConversionError, match="node 'c1' \\(Conv, opset 13\\): auto_pad='SIDEWAYS' is not valid"):
        from_onnx(model)
