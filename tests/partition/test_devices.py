"""Named sub-targets: per-call-site placement, copies, and builds per piece."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera.backend.report import partition_report
from tessera.errors import TesseraError
from tessera.frontend import from_onnx
from tessera.op.annotation import on_target
from tessera.op.registry import Op, OpPattern
from tessera.relay.expr import Call, Function
from tessera.relay.module import IRModule
from tessera.relay.visitor import post_order, rewrite
from tessera.target import KINDS, TargetKind, parse_named_targets
from tessera.target.builtin import c_toolchain
from tessera.target.errors import TargetError
from tessera.testing.models import ort_session
from tessera.transform.pass_infra import PassContext
from tessera.transform.plan_devices import pieces_of, pin_function, register_device_policy

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
HOST_PIECES = "little: c -march=x86-64; big: c"
HEAVY = {"nn.conv2d", "nn.matmul", "nn.dense"}


@pytest.fixture(scope="module")
def digits():
    model = onnx.load(DIGITS)
    mod, params = from_onnx(model)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    ref = ort_session(model, threads=1).run(None, {inp.name: x})[0]
    return mod, params, x, ref


def placement(lib) -> list[tuple[str, list[str]]]:
    """(piece, operators) of every kernel, in execution order."""
    return [(k.target, k.ops) for k in partition_report(lib).kernels]


def pin_ops(mod: IRModule, op_name: str, piece: str) -> IRModule:
    def visit(old, new):
        if isinstance(new, Call) and isinstance(new.op, Op) and new.op.name == op_name:
            return on_target(new, piece)
        return None

    main = mod.main
    return mod.with_function("main", Function(main.params, rewrite(main.body, visit), main.ret_type, main.attrs))


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------ placement

def test_automatic_policy_puts_convolutions_and_dense_on_the_faster_piece(digits):
    mod, params, x, ref = digits
    lib = tessera.build(mod, target=HOST_PIECES, params=params)
    placed = placement(lib)
    heavy = [piece for piece, ops in placed if HEAVY & set(ops)]
    assert len(heavy) == 3 and set(heavy) == {"big"}  # two convolutions and the classifier
    assert {piece for piece, _ in placed} == {"little", "big"}
    close(lib(x)[0], ref)
    # each piece compiled by its own target: the baseline piece without -march=native
    sources = lib.c_sources
    assert any(name.startswith("little_") for name in sources) and any(name.startswith("big_") for name in sources)
    flags = {tc.cflags for tc, s in lib.module.units() if s.name.startswith(("little_", "big_"))}
    assert any("-march=x86-64" in f for f in flags) and any("-march=native" in f for f in flags)


def test_aot_executor_runs_a_split_model_on_the_host(digits):
    mod, params, x, ref = digits
    lib = tessera.build(mod, target=HOST_PIECES, params=params, executor="aot")
    files = lib.files()
    assert any(f.startswith("codegen/big/src/") for f in files)
    assert any(f.startswith("codegen/host/src/") and "little" in f for f in files)
    close(lib.run_host([x])[0], ref)
    import json
    meta = json.loads(files["metadata.json"])
    assert meta["targets"]["little"]["host"] and meta["targets"]["big"]["folder"] == "codegen/big"


def test_call_site_pin_is_honoured(digits):
    mod, params, x, ref = digits
    lib = tessera.build(pin_ops(mod, "nn.conv2d", "little"), target=HOST_PIECES, params=params)
    placed = placement(lib)
    assert {p for p, ops in placed if "nn.conv2d" in ops} == {"little"}
    assert {p for p, ops in placed if "nn.matmul" in ops} == {"big"}  # unpinned: still the policy
    close(lib(x)[0], ref)


def test_function_pin_covers_every_call_of_the_function(digits):
    mod, params, x, ref = digits
    pinned = mod.with_function("main", pin_function(mod.main, "little"))
    lib = tessera.build(pinned, target=HOST_PIECES, params=params)
    assert {p for p, _ in placement(lib)} == {"little"}
    close(lib(x)[0], ref)


def test_pinned_local_function_is_inlined_onto_its_piece():
    from tessera import relay
    from tessera.op import elemwise as ew

    t = relay.TensorType((4, 8), "float32")
    x, a = relay.Var("x", t), relay.Var("a", t)
    inner = pin_function(relay.Function((a,), ew.exp(ew.negative(a))), "big")
    body = ew.relu(Call(inner, (ew.add(x, x),)))
    lib = tessera.build(relay.Function((x,), body), target="little: c -march=x86-64; big: c -march=x86-64")
    placed = placement(lib)
    assert all(p == "big" for p, ops in placed if {"exp", "negative"} & set(ops))
    assert {p for p, ops in placed if "add" in ops} == {"little"}
    v = np.linspace(-1, 1, 32, dtype="float32").reshape(4, 8)
    close(lib(v)[0], np.maximum(np.exp(-(v + v)), 0))


def test_a_registered_policy_can_replace_the_default(digits):
    mod, params, x, ref = digits
    seen = []

    @register_device_policy("test_last_piece")
    def last_piece(req):
        seen.append(req.call.op.name)
        return req.candidates[-1]

    lib = tessera.build(mod, target="big: c; little: c -march=x86-64", params=params,
                        ctx=PassContext(config={"device_policy": "test_last_piece"}))
    assert {p for p, _ in placement(lib)} == {"little"} and "nn.conv2d" in seen
    close(lib(x)[0], ref)


# ----------------------------------------------------------------- copies

def _copies(lib) -> list[Call]:
    return [n for n in post_order(lib.partitioned_mod.main) if isinstance(n, Call) and isinstance(n.op, Function)
            and any(isinstance(c, Call) and isinstance(c.op, Op) and c.op.name == "device_copy"
                    for c in post_order(n.op.body))]


def test_copies_only_where_a_tensor_moves_between_memories(digits):
    mod, params, x, ref = digits
    shared = tessera.build(mod, target=HOST_PIECES, params=params)
    assert _copies(shared) == []  # same (system) memory: no copies
    lib = tessera.build(mod, target="little: c -march=x86-64 -memory=sram; big: c -memory=dram", params=params)
    copies = _copies(lib)
    placed = [p for p, _ in placement(lib) if p != "device_copy"]
    # one crossing into big after the input normalisation, one back to the host piece for the output
    assert len(copies) == 2
    kernels = partition_report(lib).kernels
    order = [(k.target, "device_copy" in k.ops) for k in kernels]
    assert order[0] == ("little", False) and order[1] == ("big", True) and order[-1] == ("little", True)
    # consecutive calls on big are not separated by copies
    assert all(not is_copy for _, is_copy in order[2:-1]) and set(placed[1:-1]) == {"big"}
    close(lib(x)[0], ref)


# ------------------------------------------------------------- Cortex-M

def _arch(obj: Path) -> str:
    out = subprocess.run(["arm-none-eabi-readelf", "-A", str(obj)], capture_output=True, text=True, check=True).stdout
    (line,) = [ln for ln in out.splitlines() if "Tag_CPU_arch:" in ln]
    fp = "VFP registers" in out
    return line.split(":", 1)[1].strip() + (" hard-float" if fp else "")


def test_cortex_m_pieces_build_for_their_own_cpu_and_run_under_qemu(digits, tmp_path):
    mod, params, x, ref = digits
    spec = "low_power_cpu: c -mcpu=cortex-m0; inference_cpu: c -mcpu=cortex-m7"
    lib = tessera.build(mod, target=spec, params=params, executor="aot")
    objects = lib.compile_pieces(tmp_path)
    assert set(objects) == {"low_power_cpu", "inference_cpu"}
    assert {_arch(o) for o in objects["low_power_cpu"]} == {"v6S-M"}  # Armv6-M, soft float
    assert {_arch(o) for o in objects["inference_cpu"]} == {"v7E-M hard-float"}
    assert {p for p, ops in placement(lib) if HEAVY & set(ops)} == {"inference_cpu"}
    out, run = lib.run_board("mps2-an500", [x])  # functional check: one image for the M7
    close(out[0], ref)


def test_graph_executor_refuses_pieces_for_another_machine(digits):
    mod, params, _, _ = digits
    with pytest.raises(TesseraError, match="piece 'm7'.*another machine.*executor='aot'"):
        tessera.build(mod, target="cpu: c; m7: c -mcpu=cortex-m7", params=params)


# --------------------------------------------------------- bad configurations

def test_pin_to_an_unknown_piece(digits):
    mod, params, _, _ = digits
    with pytest.raises(TesseraError, match="'bgi'.*did you mean 'big'"):
        tessera.build(pin_ops(mod, "nn.relu", "bgi"), target=HOST_PIECES, params=params)


def test_no_host_piece():
    with pytest.raises(TargetError, match="host piece 'main' is not defined"):
        parse_named_targets(HOST_PIECES, host="main")
    with pytest.raises(TargetError, match="no pieces"):
        parse_named_targets(" ; ")


@pytest.fixture
def elementwise_only_kind():
    """A CPU whose code generator handles only elementwise operators (think a small DSP)."""
    kind = TargetKind.register("test_ewcpu", device="cpu")
    kind.set_toolchain(lambda t: c_toolchain(tessera.target.Target("c")))
    kind.set_codegen(KINDS.get("c").codegen)
    kind.set_supports_op(lambda target, op: op.pattern <= OpPattern.BROADCAST)
    yield kind
    KINDS.remove("test_ewcpu")


def test_pin_to_a_piece_that_cannot_run_the_op(digits, elementwise_only_kind):
    mod, params, _, _ = digits
    with pytest.raises(TesseraError, match="nn.conv2d is pinned to piece 'dsp'.*cannot run it; pieces that can: cpu"):
        tessera.build(pin_ops(mod, "nn.conv2d", "dsp"), target="cpu: c; dsp: test_ewcpu", params=params)


def test_capability_limits_the_automatic_choice(digits, elementwise_only_kind):
    mod, params, x, ref = digits
    spec = "cpu: c -march=x86-64; dsp: test_ewcpu"
    pieces = pieces_of(parse_named_targets(spec))
    assert pieces["dsp"].speed > pieces["cpu"].speed  # the policy would prefer dsp for heavy calls...
    lib = tessera.build(mod, target=spec, params=params)
    assert {p for p, ops in placement(lib) if HEAVY & set(ops)} == {"cpu"}  # ...but it cannot run them
    close(lib(x)[0], ref)


def test_function_pin_works_for_accelerators_too(digits, blas_takes_small_gemms):
    mod, params, x, ref = digits
    offloaded = tessera.build(mod, target="blas", params=params)
    assert "blas" in {p for p, _ in placement(offloaded)}
    kept = tessera.build(mod.with_function("main", pin_function(mod.main, "host")), target="blas", params=params)
    assert {p for p, _ in placement(kept)} == {"host"}
    close(kept(x)[0], ref)


def test_memory_pools_can_be_reserved_for_a_piece(digits):
    from tessera.backend.memory_plan import PoolSpec
    from tessera.backend.program_memory import MemoryOptions

    mod, params, x, ref = digits
    pools = MemoryOptions(pools=(PoolSpec("big_tcm", None, ("big",)), PoolSpec("shared")))
    lib = tessera.build(mod, target=HOST_PIECES, params=params, executor="aot",
                        ctx=PassContext(config={"memory": pools}))
    tcm, shared = lib.program.pools
    assert tcm.name == "big_tcm" and tcm.size > 0 and shared.size > 0
    # the input normalisation runs on little, so its output (read by big) cannot live in big's memory
    first = lib.program.steps[0]
    owner = {b.name for b in shared.plan.buffers}
    assert first.args[-1].buffer_owner.name in owner
    close(lib.run_host([x])[0], ref)
