"""`exaccel`: an example tessera target kind that lives outside tessera.

It takes float32 2-D matrix products (`nn.matmul`) from the graph and runs
each as a call of `exaccel_matmul_f32`, a C function shipped in this package
(`exaccel_matmul.c`). Importing the module registers the kind and the alias
`exaccel` (host C plus this accelerator); the package's `tessera.targets`
entry point names this module, so an installed package needs no import.

    tessera compile model.onnx -t exaccel -o model.so
    tessera compile model.onnx --executor aot -t "c -mcpu=cortex-m4 -accelerators=exaccel" -o model.tar
"""

from __future__ import annotations

from pathlib import Path

from tessera import te
from tessera.backend.lower_partition import LowerPartitions, Lowering
from tessera.codegen.c_host import build_c_module
from tessera.codegen.c_source import CodeGenC
from tessera.relay.dataflow_pattern import Match, is_op, wildcard
from tessera.relay.module import IRModule
from tessera.relay.pattern_table import PatternEntry
from tessera.relay.ty import TensorType
from tessera.runtime.module import CSourceModule
from tessera.target import RELAY_TO_TIR, TIR_TO_RUNTIME, Target, TargetKind, register_tag

KIND = "exaccel"
KERNEL = "exaccel_matmul_f32"
KERNEL_SOURCE = Path(__file__).with_name("exaccel_matmul.c")
PROTOTYPE = f"void {KERNEL}(const float *a, const float *b, float *c, int32_t m, int32_t k, int32_t n);"


# ------------------------------------------------------------ what it takes
MATMUL = is_op("nn.matmul")(wildcard(), wildcard())


def _float32_2d(m: Match) -> bool:
    """The check of a match: both operands and the product are 2-D float32."""
    product = m[MATMUL]
    types = [a.checked_type for a in product.args] + [product.checked_type]
    return all(isinstance(t, TensorType) and t.dtype == "float32" and t.ndim == 2 for t in types)


MATMUL_ENTRY = PatternEntry(f"{KIND}.matmul", MATMUL, _float32_2d)
PATTERN_TABLE = [MATMUL_ENTRY]


# --------------------------------------------------------------- RelayToTIR
def _matmul(m: Match, args: list[te.Tensor]) -> te.Tensor:
    """The product as one extern stage: the kernel called on the operands' and the result's buffers."""
    (a, b), (rows, k), n = args, args[0].shape, args[1].shape[1]
    return te.extern((rows, n), [a, b], lambda ins, out: te.call_extern(
        KERNEL, te.pointer(ins[0]), te.pointer(ins[1]), te.pointer(out), rows, k, n), name="matmul")


# every `exaccel` partition becomes a PrimFunc of the same name, marked for this kind's generator
relay_to_tir = LowerPartitions(KIND, [Lowering(MATMUL_ENTRY, MATMUL, _matmul)])


# ------------------------------------------------------------- TIRToRuntime
class ExaccelCodeGen(CodeGenC):
    """The host C generator, plus the kernel's prototype."""

    def preamble_lines(self) -> list[str]:
        return [*super().preamble_lines(), PROTOTYPE]


def tir_to_runtime(mod: IRModule, target: Target) -> CSourceModule:
    module = build_c_module(mod, target, codegen_class=ExaccelCodeGen, prefix=KIND)
    module.extra_sources.append(KERNEL_SOURCE)  # the kernel itself, in every executor's output
    return module


(
    TargetKind.register(KIND, device="cpu", accelerator=True,
                        doc="example out-of-tree target: float32 2-D matmul in a C function of its own")
    .set_pattern_table(PATTERN_TABLE)
    .set_attr(RELAY_TO_TIR, relay_to_tir)
    .set_attr(TIR_TO_RUNTIME, tir_to_runtime)
)
register_tag(KIND, {"kind": "c", "accelerators": [{"kind": KIND}]}, doc="host C + the exaccel example")
