"""Files the TFLite importer refuses, with messages naming what is wrong."""

from __future__ import annotations

import pytest

from tessera.errors import ConversionError, UnsupportedOperatorError
from tessera.frontend import from_tflite
from tessera.testing.litert import DATA, mlperf_tiny_path


def test_not_a_flatbuffer(tmp_path):
    bad = tmp_path / "model.tflite"
    bad.write_bytes(b"\x08\x00\x00\x00ONNXsomething else entirely")
    with pytest.raises(ConversionError, match=r"not a TFLite model \(file identifier b'ONNX', expected b'TFL3'\)"):
        from_tflite(bad)


def test_too_short(tmp_path):
    bad = tmp_path / "model.tflite"
    bad.write_bytes(b"TFL")
    with pytest.raises(ConversionError, match="3 bytes is too short"):
        from_tflite(bad)


def test_truncated(tmp_path):
    data = mlperf_tiny_path("kws_ds_cnn").read_bytes()
    bad = tmp_path / "model.tflite"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(ConversionError, match="truncated"):
        from_tflite(bad)


def test_missing_file(tmp_path):
    with pytest.raises(ConversionError, match="cannot read TFLite model"):
        from_tflite(tmp_path / "nope.tflite")


def test_unsupported_operator_names_it_and_lists_the_supported():
    with pytest.raises(UnsupportedOperatorError,
                       match=r"operator #0 \(GATHER\): TFLite operator GATHER is not supported by tessera\. "
                             r"Supported operators: ADD, AVERAGE_POOL_2D, .*CONV_2D"):
        from_tflite(DATA / "unsupported" / "gather.float.tflite")


def _one_operator_model(builtin: int, custom: str | None = None, dtype: int = 0) -> bytes:
    """A flatbuffer with one operator y = OP(x), x and y (1, 4), written with the schema's builder."""
    import flatbuffers
    import tflite

    b = flatbuffers.Builder(512)
    names = [b.CreateString(n) for n in ("x", "y")]
    custom_code = b.CreateString(custom) if custom is not None else None

    def int_vector(values: list[int]) -> int:
        b.StartVector(4, len(values), 4)
        for v in reversed(values):
            b.PrependInt32(v)
        return b.EndVector()

    def table_vector(offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    tensors = []
    for name in names:
        shape = int_vector([1, 4])
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, dtype)
        tflite.TensorAddName(b, name)
        tflite.TensorAddBuffer(b, 0)
        tensors.append(tflite.TensorEnd(b))
    op_inputs, op_outputs = int_vector([0]), int_vector([1])
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, 0)
    tflite.OperatorAddInputs(b, op_inputs)
    tflite.OperatorAddOutputs(b, op_outputs)
    operator = tflite.OperatorEnd(b)
    tensor_vector, operator_vector = table_vector(tensors), table_vector([operator])
    graph_inputs, graph_outputs = int_vector([0]), int_vector([1])
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensor_vector)
    tflite.SubGraphAddInputs(b, graph_inputs)
    tflite.SubGraphAddOutputs(b, graph_outputs)
    tflite.SubGraphAddOperators(b, operator_vector)
    subgraph = tflite.SubGraphEnd(b)
    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(builtin, 127))
    tflite.OperatorCodeAddBuiltinCode(b, builtin)
    tflite.OperatorCodeAddVersion(b, 1)
    if custom_code is not None:
        tflite.OperatorCodeAddCustomCode(b, custom_code)
    code = tflite.OperatorCodeEnd(b)
    tflite.BufferStart(b)
    empty = tflite.BufferEnd(b)
    codes, subgraphs, buffers = table_vector([code]), table_vector([subgraph]), table_vector([empty])
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, codes)
    tflite.ModelAddSubgraphs(b, subgraphs)
    tflite.ModelAddBuffers(b, buffers)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_a_builder_made_model_imports_and_runs():
    import numpy as np

    import tessera
    from tessera.testing.litert import run_litert

    data = _one_operator_model(19)  # RELU
    mod, params = from_tflite(data)
    x = np.linspace(-2, 2, 4, dtype=np.float32).reshape(1, 4)
    np.testing.assert_array_equal(tessera.build(mod, params=params)(x)[0], run_litert(data, [x])[0])


def test_custom_operator_is_named():
    with pytest.raises(ConversionError, match=r"operator #0: custom operator 'MyOp' is not supported"):
        from_tflite(_one_operator_model(32, custom="MyOp"))  # 32: CUSTOM


def test_operator_code_newer_than_the_schema():
    with pytest.raises(ConversionError, match=r"operator #0: unknown builtin operator code 9999 \(newer than"):
        from_tflite(_one_operator_model(9999))


def test_unsupported_element_type_names_the_tensor():
    with pytest.raises(ConversionError, match=r"tensor #0 'x': element type COMPLEX64 is not supported; supported: "
                                              r"FLOAT32, INT32"):
        from_tflite(_one_operator_model(19, dtype=8))  # 8: COMPLEX64
