"""The AOT executor: standalone C, its interfaces, Model Library Format, boards."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera.backend.aot.runner import MlfModel, include_flags, model_sources
from tessera.cli import main as cli
from tessera.errors import CompileError
from tessera.frontend import from_onnx
from tessera.testing import mlperf_tiny
from tessera.testing.models import data_input, light_path, ort_run, seeded_input, stored_output
from tessera.testing.weights import randomize_weights

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
BOARDS = {"mps2-an386": "c -mcpu=cortex-m4", "mps2-an500": "c -mcpu=cortex-m7", "mps3-an547": "c -mcpu=cortex-m55"}


def _digits(target: str = "c"):
    mod, params = from_onnx(str(DIGITS))
    return tessera.build(mod, target=target, params=params, executor="aot", mod_name="digits"), mod, params


def _digit_input() -> np.ndarray:
    return np.load(ROOT / "examples" / "digits" / "digits_heldout.npz")["images"][:1].reshape(1, 1, 8, 8).astype(np.float32)


def test_host_run_matches_the_graph_executor():
    lib, mod, params = _digits()
    x = _digit_input()
    np.testing.assert_allclose(lib.run_host([x])[0], tessera.build(mod, params=params)(x)[0], rtol=1e-5, atol=1e-6)
    assert lib.program.outputs[0].name == "logits"  # the ONNX output name reaches the C interface


def test_model_library_format_is_complete_and_deterministic(tmp_path):
    lib, _, _ = _digits()
    a, b = lib.export_library(tmp_path / "a.tar"), _digits()[0].export_library(tmp_path / "b.tar")
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tar:
        names = set(tar.getnames())
        meta = json.loads(tar.extractfile("metadata.json").read())
    assert {"codegen/host/include/tsgen_digits.h", "codegen/host/src/tsgen_digits_params.bin",
            "codegen/host/src/tsgen_digits_executor.c", "runtime/include/tessera/c_runtime_api.h",
            "runtime/include/tessera/c_backend_api.h", "runtime/src/workspace_stack.c"} <= names
    assert meta["model_name"] == "digits" and meta["executor"] == "aot"
    assert meta["inputs"] == [{"name": "image", "c_name": "image", "dtype": "float32", "shape": [1, 1, 8, 8],
                              "size_bytes": 256}]
    assert {p["name"] for p in meta["pools"]} == {"pool", "workspace"}
    assert meta["pools"][0]["size_bytes"] >= meta["lower_bound_bytes"] > 0
    assert all({"name", "workspace_bytes"} <= set(k) for k in meta["kernels"])
    assert meta["tessera_version"] == tessera.__version__ and meta["target"] == "c"


@pytest.mark.parametrize("cc, flags", [
    ("gcc", ["-O2"]),
    ("arm-none-eabi-gcc", ["-O2", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]),
])
def test_generated_c_and_crt_compile_warning_free(tmp_path, cc, flags):
    lib, _, _ = _digits()
    folder = lib.export_library(tmp_path / "mlf")
    for src in model_sources(folder):
        proc = subprocess.run([cc, *flags, "-std=gnu11", "-Wall", "-Wextra", "-Werror", *include_flags(folder),
                               "-c", str(src), "-o", str(tmp_path / (src.stem + ".o"))], capture_output=True, text=True)
        assert proc.returncode == 0, f"{src.name}: {proc.stderr}"


PACKED_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "tsgen_digits.h"
int main(void) {
  static float image[64], logits[10];
  int64_t in_shape[4] = {1, 1, 8, 8}, out_shape[2] = {1, 10}, bad_shape[2] = {1, 9};
  TSTensor args[2] = {{image, in_shape, 4, TS_DTYPE_FLOAT, 32}, {logits, out_shape, 2, TS_DTYPE_FLOAT, 32}};
  int ok = tsgen_digits_run_packed(args, 2);
  args[1].shape = bad_shape;
  int bad = tsgen_digits_run_packed(args, 2);
  int count = tsgen_digits_run_packed(args, 1);
  /* the application's own memory, no static pools */
  uint8_t* pool = aligned_alloc(16, (TSGEN_DIGITS_POOL_SIZE + 15) / 16 * 16);
  uint8_t* ws = aligned_alloc(16, (TSGEN_DIGITS_WORKSPACE_SIZE + 15) / 16 * 16);
  struct tsgen_digits_inputs in = {image};
  struct tsgen_digits_outputs out = {logits};
  struct tsgen_digits_pools pools = {pool, ws};
  int user = tsgen_digits_run_with_pools(&in, &out, &pools);
  printf("%d %d %d %d\n", ok, bad, count, user);
  return 0;
}
"""


def test_packed_interface_and_user_pools(tmp_path):
    lib, _, _ = _digits()
    folder = lib.export_library(tmp_path / "mlf")
    (tmp_path / "main.c").write_text(PACKED_MAIN)
    exe = tmp_path / "packed"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", *include_flags(folder), *map(str, model_sources(folder)),
                    str(tmp_path / "main.c"), "-o", str(exe), "-lm"], check=True)
    ok, bad, count, user = map(int, subprocess.run([str(exe)], capture_output=True, text=True).stdout.split())
    assert (ok, bad, count, user) == (0, -4, -2, 0)  # TS_OK, TS_ERROR_ARG_SHAPE, TS_ERROR_ARG_COUNT, TS_OK


@pytest.mark.parametrize("board", BOARDS)
def test_digits_on_boards(board):
    lib, _, _ = _digits(BOARDS[board])
    x = _digit_input()
    outputs, run = lib.run_board(board, [x])
    expected = ort_run(onnx.load(DIGITS), {"image": x})[0]
    np.testing.assert_allclose(outputs[0], expected, rtol=1e-4, atol=1e-5)
    assert run.sizes.flash > lib.program.params_size and run.sizes.ram >= lib.program.pool_size


@pytest.mark.parametrize("name", list(mlperf_tiny.MODELS))
def test_mlperf_tiny_on_host_and_boards(name, record_property):
    record_property("suite", "MLPerf Tiny, AOT on host and Cortex-M4/M7/M55")
    model = onnx.load(mlperf_tiny.model_path(name))
    x = mlperf_tiny.sample_input(name)
    expected = ort_run(model, {"input": x})[0]
    mod, params = from_onnx(model)
    host = tessera.build(mod, params=params, executor="aot", mod_name=name)
    np.testing.assert_allclose(host.run_host([x])[0], expected, rtol=1e-4, atol=1e-5)
    for board, target in BOARDS.items():
        lib = tessera.build(mod, target=target, params=params, executor="aot", mod_name=name)
        outputs, _ = lib.run_board(board, [x])
        np.testing.assert_allclose(outputs[0], expected, rtol=1e-4, atol=1e-5, err_msg=board)


@pytest.mark.parametrize("name", ["resnet50", "squeezenet"])
def test_light_models_aot_on_host(name):
    original = onnx.load(light_path(name))
    inits = {i.name for i in original.graph.initializer}
    from onnx.backend.test.runner import Runner

    (vi,) = [v for v in original.graph.input if v.name not in inits]
    x = Runner.generate_dummy_data(vi, seed=0, name=name, random=False)
    mod, params = from_onnx(original)
    lib = tessera.build(mod, params=params, executor="aot", mod_name=name)
    np.testing.assert_allclose(lib.run_host([x])[0], stored_output(name), rtol=1e-3, atol=1e-7)
    model = randomize_weights(original, seed=0)
    input_name, shape = data_input(model)
    x = seeded_input(shape, seed=1)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, executor="aot", mod_name=name)
    np.testing.assert_allclose(lib.run_host([x])[0], ort_run(model, {input_name: x})[0], rtol=1e-3, atol=1e-4)


def _big_weights_model(size: int) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    w = np.random.default_rng(0).standard_normal((size, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_a_model_too_big_for_the_board_fails_with_the_sizes():
    mod, params = from_onnx(_big_weights_model(10_000))  # 2.56 MB of weights
    lib = tessera.build(mod, target="c -mcpu=cortex-m55", params=params, executor="aot", mod_name="big")
    with pytest.raises(CompileError, match=r"does not fit mps3-an547: its weights need 2560000 bytes, "
                                           r"the board's SRAM, 2 MiB @0x01000000 has 2097152"):
        lib.run_board("mps3-an547", [np.zeros((1, 10_000), np.float32)])


def test_cli_compiles_a_tarball_and_checks_it_on_a_board(tmp_path, capsys):
    tar = tmp_path / "kws.tar"
    model = mlperf_tiny.model_path("kws_ds_cnn")
    assert cli(["compile", str(model), "--executor", "aot", "-t", "c -mcpu=cortex-m4", "-o", str(tar), "-q"]) == 0
    assert MlfModel(tar).reference_model is not None
    assert cli(["run", str(tar), "--board", "mps2-an386", "--check", "--count-instructions", "-q"]) == 0
    out = capsys.readouterr().out
    assert "CHECK OK" in out and "mps2-an386: flash" in out and "instructions per inference:" in out


def test_kernels_from_target_hooks_are_called_like_any_other(blas_takes_small_gemms):
    # the blas partitions become PrimFuncs (RelayToTIR) that the executor calls directly
    mod, params = from_onnx(str(DIGITS))
    lib = tessera.build(mod, target="blas", params=params, executor="aot", mod_name="digits")
    assert any("blas" in k for k in lib.program.kernels)
    assert "-lopenblas" in lib.metadata()["toolchain"]["link_flags"]
    blas_steps = [s for s in lib.program.steps if "blas" in s.kernel]
    # the im2col scratch is a planned buffer in the pool, alive during its step only, not run-time workspace
    scratch = [t for s in blas_steps for t in s.scratch]
    assert scratch and not lib.program.workspace and lib.metadata()["pools"][1]["size_bytes"] == 0
    assert all(t.producer == t.last_use and t.pool == "pool" for t in scratch)
    x = _digit_input()
    np.testing.assert_allclose(lib.run_host([x])[0], ort_run(onnx.load(DIGITS), {"image": x})[0], rtol=1e-4, atol=1e-5)
