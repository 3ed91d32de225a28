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

from tessera.backend.target_hooks import TARGET_ATTR
from tessera.codegen.c_host import build_c_module
from tessera.codegen.c_source import CodeGenC
from tessera.relay.dataflow_pattern import is_op, wildcard
from tessera.relay.expr import Call, Expr, Function, Tuple
from tessera.relay.module import IRModule
from tessera.relay.pattern_table import PatternEntry
from tessera.relay.ty import TensorType
from tessera.relay.visitor import post_order
from tessera.runtime.module import CSourceModule
from tessera.target import RELAY_TO_TIR, TIR_TO_RUNTIME, Target, TargetKind, register_tag
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer

KIND = "exaccel"
KERNEL = "exaccel_matmul_f32"
KERNEL_SOURCE = Path(__file__).with_name("exaccel_matmul.c")
PROTOTYPE = f"void {KERNEL}(const float *a, const float *b, float *c, int32_t m, int32_t k, int32_t n);"


# ------------------------------------------------------------ what it takes
def _float32_2d(composite_body: Expr) -> bool:
    """The check of a match: both operands and the product are 2-D float32."""
    assert isinstance(composite_body, Call)
    types = [a.checked_type_ for a in composite_body.args] + [composite_body.checked_type_]
    return all(isinstance(t, TensorType) and t.dtype == "float32" and t.ndim == 2 for t in types)


PATTERN_TABLE = [PatternEntry(f"{KIND}.matmul", is_op("nn.matmul")(wildcard(), wildcard()), _float32_2d)]


# --------------------------------------------------------------- RelayToTIR
def _buffer(name: str, expr: Expr) -> Buffer:
    ty = expr.checked_type_
    assert isinstance(ty, TensorType)
    return Buffer(name, ty.shape, ty.dtype)


def _matmul(a: Buffer, b: Buffer, c: Buffer) -> S.Stmt:
    (m, k), n = a.shape, b.shape[1]
    ptrs = [E.BufferPtr(buf, E.IntImm(0)) for buf in (a, b, c)]
    return S.Evaluate(E.call(KERNEL, [*ptrs, E.IntImm(m), E.IntImm(k), E.IntImm(n)], "void"))


def lower_partition(func: Function, symbol: str, target: Target) -> S.PrimFunc:
    """A partition (calls of `exaccel.matmul` composites) -> a PrimFunc calling the kernel."""
    params = [_buffer(f"p{k}", p) for k, p in enumerate(func.params)]
    results = list(func.body.fields) if isinstance(func.body, Tuple) else [func.body]
    outs = [_buffer(f"out{k}", r) for k, r in enumerate(results)]
    buffers = {id(e): buf for e, buf in zip([*func.params, *results], [*params, *outs])}
    scratch: list[Buffer] = []  # products a later product of the same partition reads
    steps: list[S.Stmt] = []
    for node in post_order(func.body, into_functions=False):
        if isinstance(node, Call) and isinstance(node.op, Function):
            if id(node) not in buffers:
                buffers[id(node)] = _buffer(f"t{len(scratch)}", node)
                scratch.append(buffers[id(node)])
            a, b = (buffers[id(arg)] for arg in node.args)
            steps.append(_matmul(a, b, buffers[id(node)]))
    body: S.Stmt = S.seq(*steps)
    for buf in reversed(scratch):
        body = S.Allocate(buf, body)  # visible to memory planning like any kernel's scratch
    return S.PrimFunc(symbol, (*params, *outs), body, len(params), {TARGET_ATTR: target})


def relay_to_tir(mod: IRModule) -> IRModule:
    """Replace every `exaccel` partition by a PrimFunc of the same name."""
    for gv, func in mod.items():
        if isinstance(func, Function) and func.attrs.compiler == KIND:
            target = func.attrs.target
            assert isinstance(target, Target)
            mod = mod.with_function(gv, lower_partition(func, gv.name_hint, target))
    return mod


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
