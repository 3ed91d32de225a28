"""MLPerf Tiny on emulated Cortex-M boards: flash, RAM and instructions.

Builds each of the four MLPerf Tiny reference models (seeded weights) with
the AOT executor for each board, runs it under QEMU, checks the outputs
against onnxruntime, and prints flash and RAM (from arm-none-eabi-size) and,
on the Cortex-M4 board, instructions per inference (deterministic, counted
by a QEMU TCG plugin) with the optimistic milliseconds at 120 MHz beside the
published MLPerf Tiny v1.0 Cortex-M4 @120 MHz latencies. Those published
figures are for int8 models; the rows here are float32.

    python benchmarks/mcu.py                         # all models, all boards
    python benchmarks/mcu.py --boards mps2-an386     # one board
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx

import tessera
from tessera.frontend import from_onnx
from tessera.micro.boards import BOARDS
from tessera.testing import mlperf_tiny
from tessera.testing.models import ort_run

COUNT_BOARD = "mps2-an386"
MHZ = 120


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=list(mlperf_tiny.MODELS),
                        help=f"any of {', '.join(mlperf_tiny.MODELS)} (default all)")
    parser.add_argument("--boards", nargs="*", default=["mps2-an386", "mps2-an500", "mps3-an547"],
                        help=f"any of {', '.join(BOARDS)}")
    args = parser.parse_args(argv)
    for given, valid in ((args.models, mlperf_tiny.MODELS), (args.boards, BOARDS)):
        unknown = sorted(set(given) - set(valid))
        if unknown:
            parser.error(f"unknown {unknown}; choose from {', '.join(valid)}")
    print(f"{'model':15s} {'board':11s} {'flash B':>9s} {'RAM B':>9s} {'pool B':>8s} {'bound B':>8s} "
          f"{'insns/inference':>16s} {'ms@120MHz':>10s} {'max |diff|':>10s}")
    failed = False
    for name in args.models:
        model = onnx.load(mlperf_tiny.model_path(name))
        x = mlperf_tiny.sample_input(name)
        expected = ort_run(model, {"input": x})[0]
        mod, params = from_onnx(model)
        for board in args.boards:
            spec = BOARDS[board]
            lib = tessera.build(mod, target=spec.target_string, params=params, executor="aot", mod_name=name)
            outputs, run = lib.run_board(board, [x], count_instructions=board == COUNT_BOARD)
            diff = float(np.max(np.abs(outputs[0] - expected)))
            failed |= not np.allclose(outputs[0], expected, rtol=1e-4, atol=1e-5)
            insns = run.inference_instructions
            ms = f"{insns / (MHZ * 1e3):10.1f}" if insns else f"{'-':>10s}"
            print(f"{name:15s} {board:11s} {run.sizes.flash:9d} {run.sizes.ram:9d} {lib.program.pool_size:8d} "
                  f"{lib.program.memory.lower_bound:8d} {insns or '-':>16} {ms} {diff:10.2e}", flush=True)
    print("\npublished MLPerf Tiny v1.0, Cortex-M4 @120 MHz, int8 (ms): TFLM / microTVM+CMSIS-NN / X-CUBE-AI")
    for name, spec in mlperf_tiny.MODELS.items():
        if name in args.models:
            lat = spec.latency_ms
            print(f"  {name:15s} {lat.tflm:g} / {lat.microtvm_cmsis_nn:g} / {lat.x_cube_ai:g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
