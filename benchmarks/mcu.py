"""MLPerf Tiny on emulated Cortex-M boards: flash, RAM and instructions.

Builds each of the four MLPerf Tiny reference models (seeded weights) with
the AOT executor for each board, runs it under QEMU, checks the outputs
against onnxruntime, and prints flash and RAM (from arm-none-eabi-size) and,
on the Cortex-M4 board, instructions per inference (deterministic, counted
by a QEMU TCG plugin) with the optimistic milliseconds at 120 MHz. Both
precisions: float32, and int8 (the models quantised by onnxruntime's
quantize_static, `tessera.testing.mlperf_tiny_int8`; int8 outputs must equal
onnxruntime's reference run bit for bit). The int8 Cortex-M4 rows are then
set beside the published MLPerf Tiny v1.0 Cortex-M4 @120 MHz latencies (which
are for int8 models), with the first bar: below the TFLM figure.

For int8 each row also shows the planned pool against the int8 activation
bound (the largest layer's int8 input(s) + output, computed from the model by
`tessera.testing.int8_bound`; graph inputs and outputs are the caller's
buffers and are not counted) and, on the Cortex-M4 board, Arm's CMSIS-NN
instruction count for the same int8 model (`CMSIS_NN_INSTRUCTIONS`) with the
ratio tessera / CMSIS-NN.

With ``--format tflite`` the int8 models are the official format instead:
the Keras reference architectures converted to full-integer TFLite by
TensorFlow's converter (``tests/data/tflite/mlperf_tiny``, made by
``scripts/make_tflite_models.py``), int8 in and out, checked bit for bit
against LiteRT's reference kernels. (The CMSIS-NN counts are for the ONNX
int8 models and are not shown beside them.)

    python benchmarks/mcu.py                                   # both precisions, all models, all boards
    python benchmarks/mcu.py --precision int8 --boards mps2-an386
    python benchmarks/mcu.py --format tflite --boards mps2-an386
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
import onnx

import tessera
from tessera.frontend import from_onnx, from_tflite
from tessera.micro.boards import BOARDS
from tessera.testing import mlperf_tiny, mlperf_tiny_int8
from tessera.testing.int8_bound import int8_activation_bound
from tessera.testing.litert import mlperf_tiny_path, run_litert, seeded_inputs
from tessera.testing.models import ort_run

COUNT_BOARD = "mps2-an386"
MHZ = 120
# CMSIS-NN (commit 99f736a6, -Ofast) on the same int8 models, QEMU mps2-an386, counted by the same plugin:
# ../shared/notes/cmsisnn-counts.md (instructions per inference = count(2 inferences) - count(1)).
CMSIS_NN_INSTRUCTIONS = {"kws_ds_cnn": 7_867_010, "vww_mobilenet": 26_071_471, "ic_resnet8": 30_015_478,
                         "ad_autoencoder": 629_498}


def _ort_exact(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime without graph optimisations: QDQ exactly as ONNX defines it."""
    return ort_run(model, {"input": x}, optimize=False)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=list(mlperf_tiny.MODELS),
                        help=f"any of {', '.join(mlperf_tiny.MODELS)} (default all)")
    parser.add_argument("--boards", nargs="*", default=["mps2-an386", "mps2-an500", "mps3-an547"],
                        help=f"any of {', '.join(BOARDS)}")
    parser.add_argument("--precision", nargs="*", default=None, choices=["float32", "int8"],
                        help="default both for onnx, int8 for tflite")
    parser.add_argument("--format", choices=["onnx", "tflite"], default="onnx",
                        help="the model files: tessera's ONNX builds, or the int8 .tflite files from TensorFlow's "
                             "converter")
    args = parser.parse_args(argv)
    tflite = args.format == "tflite"
    args.precision = args.precision or (["int8"] if tflite else ["float32", "int8"])
    if tflite and args.precision != ["int8"]:
        parser.error("--format tflite: the TFLite models are int8 (full-integer quantisation)")
    for given, valid in ((args.models, mlperf_tiny.MODELS), (args.boards, BOARDS)):
        unknown = sorted(set(given) - set(valid))
        if unknown:
            parser.error(f"unknown {unknown}; choose from {', '.join(valid)}")
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advice on pre-processing
    print(f"{'model':15s} {'dtype':7s} {'board':11s} {'flash B':>9s} {'RAM B':>9s} {'pool B':>8s} {'int8 bound':>10s} "
          f"{'pool/bound':>10s} {'insns/inference':>16s} {'CMSIS-NN':>10s} {'ratio':>6s} {'ms@120MHz':>10s} "
          f"{'max |diff|':>10s}")
    failed = False
    m4_int8: dict[str, tuple[int, int, int, int, int]] = {}  # insns, flash, RAM, pool, int8 bound
    for precision in args.precision:
        for name in args.models:
            if tflite:
                path = mlperf_tiny_path(name)
                x = seeded_inputs(path)[0]
                expected = run_litert(path, [x])[0]
                mod, params = from_tflite(path)
            else:
                model = onnx.load((mlperf_tiny_int8 if precision == "int8" else mlperf_tiny).model_path(name))
                x = mlperf_tiny.sample_input(name)
                expected = _ort_exact(model, x) if precision == "int8" else ort_run(model, {"input": x})[0]
                mod, params = from_onnx(model)
            bound = int8_activation_bound(mod, params) if precision == "int8" else 0
            for board in args.boards:
                spec = BOARDS[board]
                lib = tessera.build(mod, target=spec.target_string, params=params, executor="aot", mod_name=name)
                outputs, run = lib.run_board(board, [x], count_instructions=board == COUNT_BOARD)
                diff = float(np.max(np.abs(outputs[0].astype(np.float64) - expected)))
                if precision == "int8":
                    failed |= diff != 0.0
                else:
                    failed |= not np.allclose(outputs[0], expected, rtol=1e-4, atol=1e-5)
                insns = run.inference_instructions
                ms = f"{insns / (MHZ * 1e3):10.1f}" if insns else f"{'-':>10s}"
                if precision == "int8" and board == COUNT_BOARD and insns:
                    m4_int8[name] = (insns, run.sizes.flash, run.sizes.ram, lib.program.pool_size, bound)
                pool = lib.program.pool_size
                cmsis = CMSIS_NN_INSTRUCTIONS.get(name) if precision == "int8" and board == COUNT_BOARD and not tflite \
                    else None
                print(f"{name:15s} {precision:7s} {board:11s} {run.sizes.flash:9d} {run.sizes.ram:9d} {pool:8d} "
                      f"{bound or '-':>10} {f'{pool / bound:.3f}' if bound else '-':>10s} {insns or '-':>16} "
                      f"{cmsis or '-':>10} {f'{insns / cmsis:.2f}' if cmsis and insns else '-':>6s} {ms} "
                      f"{diff:10.2e}", flush=True)
    print("\npublished MLPerf Tiny v1.0, Cortex-M4 @120 MHz, int8 (ms): TFLM / microTVM+CMSIS-NN / X-CUBE-AI")
    for name, spec in mlperf_tiny.MODELS.items():
        if name in args.models:
            lat = spec.latency_ms
            print(f"  {name:15s} {lat.tflm:g} / {lat.microtvm_cmsis_nn:g} / {lat.x_cube_ai:g}")
    if m4_int8:
        print(f"\nint8 on the Cortex-M4 board ({COUNT_BOARD}), instructions / {MHZ} MHz (optimistic: 1 insn = 1 cycle)")
        print(f"{'model':15s} {'insns':>12s} {'CMSIS-NN':>10s} {'ratio':>6s} {'tessera ms':>10s} {'TFLM':>7s} "
              f"{'uTVM':>7s} {'X-CUBE':>7s} {'flash B':>9s} {'RAM B':>9s} {'pool B':>8s} {'int8 bound':>10s} "
              f"{'pool/bound':>10s}  below TFLM")
        bar = True
        for name, (insns, flash, ram, pool, bound) in m4_int8.items():
            lat = mlperf_tiny.MODELS[name].latency_ms
            ms = insns / (MHZ * 1e3)
            bar &= ms < lat.tflm
            cmsis = CMSIS_NN_INSTRUCTIONS[name]
            cmsis_cells = f"{'-':>10s} {'-':>6s}" if tflite else f"{cmsis:10d} {insns / cmsis:6.2f}"
            print(f"{name:15s} {insns:12d} {cmsis_cells} {ms:10.1f} {lat.tflm:7g} "
                  f"{lat.microtvm_cmsis_nn:7g} {lat.x_cube_ai:7g} {flash:9d} {ram:9d} {pool:8d} {bound:10d} "
                  f"{pool / bound:10.3f}  {'yes' if ms < lat.tflm else 'NO'}")
        print("CMSIS-NN: Arm's kernels (-Ofast) on the same int8 models and emulator, same counter; "
              "see ../shared/notes/cmsisnn-counts.md")
        print(f"first bar (every int8 model below TFLM): {'met' if bar else 'NOT met'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
