"""int8 MLPerf Tiny with the AOT executor on emulated Cortex-M4/M7/M55: outputs, SMLAD / MVE kernels, clean C."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera.backend.aot.runner import include_flags, model_sources
from tessera.cli import main as cli
from tessera.frontend import from_onnx
from tessera.testing import mlperf_tiny as mt
from tessera.testing import mlperf_tiny_int8 as q8

from .test_qnn import ort_reference

logging.getLogger().setLevel(logging.ERROR)
BOARDS = {"mps2-an386": "c -mcpu=cortex-m4", "mps2-an500": "c -mcpu=cortex-m7", "mps3-an547": "c -mcpu=cortex-m55"}
CPU_FLAGS = {
    "cortex-m4": ["-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"],
    "cortex-m55": ["-mcpu=cortex-m55", "-mfloat-abi=hard"],
}
DISASSEMBLER = {"cortex-m4": [], "cortex-m55": ["-marmv8.1-m.main"]}  # objdump decodes MVE only when told


@pytest.mark.parametrize("name", list(mt.MODELS))
def test_int8_mlperf_tiny_on_boards(name, record_property):
    record_property("suite", "MLPerf Tiny int8, AOT on host and Cortex-M4/M7/M55")
    model = onnx.load(q8.model_path(name))
    x = mt.sample_input(name)
    exact = ort_reference(model, x)
    mod, params = from_onnx(model)
    host = tessera.build(mod, params=params, executor="aot", mod_name=name)
    np.testing.assert_array_equal(host.run_host([x])[0], exact)
    for board, target in BOARDS.items():
        lib = tessera.build(mod, target=target, params=params, executor="aot", mod_name=name)
        outputs, run = lib.run_board(board, [x])
        np.testing.assert_array_equal(outputs[0], exact, err_msg=board)
        assert run.sizes.flash > lib.program.params_size


def _objects(tmp_path: Path, cpu: str) -> str:
    """Disassembly of the int8 DS-CNN's kernels built warning-free (-Wall -Wextra -Werror) for `cpu`."""
    mod, params = from_onnx(onnx.load(q8.model_path("kws_ds_cnn")))
    lib = tessera.build(mod, target=f"c -mcpu={cpu}", params=params, executor="aot", mod_name="kws")
    folder = lib.export_library(tmp_path / cpu)
    text = []
    for src in model_sources(folder):
        obj = tmp_path / f"{cpu}_{src.stem}.o"
        proc = subprocess.run(["arm-none-eabi-gcc", "-O2", "-mthumb", *CPU_FLAGS[cpu], "-std=gnu11", "-Wall",
                               "-Wextra", "-Werror", *include_flags(folder), "-c", str(src), "-o", str(obj)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{src.name}: {proc.stderr}"
        text.append(subprocess.run(["arm-none-eabi-objdump", "-d", *DISASSEMBLER[cpu], str(obj)], capture_output=True, text=True,
                                   check=True).stdout)
    return "\n".join(text)


def test_dsp_cores_multiply_accumulate_with_smlad(tmp_path):
    asm = _objects(tmp_path, "cortex-m4")
    assert "smlad" in asm and "sxtb16" in asm


def test_m55_uses_helium(tmp_path):
    asm = _objects(tmp_path, "cortex-m55")
    assert "vmlava" in asm and "vctp.8" in asm and "smlad" not in asm  # vmladava, tail-predicated


def test_cli_checks_int8_on_a_board(tmp_path, capsys):
    tar = tmp_path / "vww.tar"  # the model whose fused onnxruntime softmax is one step off: --check uses ONNX's definition
    model = q8.model_path("vww_mobilenet")
    assert cli(["compile", str(model), "--executor", "aot", "-t", "c -mcpu=cortex-m4", "-o", str(tar), "-q"]) == 0
    assert cli(["run", str(tar), "--board", "mps2-an386", "--random-input", "--check", "-q"]) == 0
    assert "CHECK OK" in capsys.readouterr().out


def test_cli_counts_int8_instructions_deterministically(tmp_path, capsys):
    tar = tmp_path / "ad.tar"
    model = q8.model_path("ad_autoencoder")
    assert cli(["compile", str(model), "--executor", "aot", "-t", "c -mcpu=cortex-m4", "-o", str(tar), "-q"]) == 0
    counts = []
    for _ in range(2):
        assert cli(["run", str(tar), "--board", "mps2-an386", "--random-input", "--check", "--count-instructions", "-q"]) == 0
        out = capsys.readouterr().out
        line = next(t for t in out.splitlines() if "instructions per inference:" in t)
        counts.append(int(line.split(":")[1].split()[0].replace(",", "")))
    assert counts[0] == counts[1] and 100_000 < counts[0] < 1_200_000  # below TFLM's 10.1 ms at 120 MHz
