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
