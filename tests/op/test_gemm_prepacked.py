"""Weights packed at compile time for the GEMM microkernel: the PackGemmWeights pass
(transform/pack_gemm_weights.py), `nn.matmul_prepacked` (op/nn/matmul_prepacked.py) and the
`ts_sgemm_<MR>x<NR>_prepacked` entry its kernel calls, built for AVX2 and this CPU against NumPy."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera.codegen.c_library import calling_units
from tessera import relay
from tessera.codegen.c_host import SHAPE_CLASSES_CONFIG
from tessera.errors import TypeInferenceError
from tessera.op import elemwise, elemwise_activation
from tessera.op.nn import matmul
from tessera.op.nn.gemm import pack_b_panels, unpack_b_panels
from tessera.op.nn.matmul_prepacked import matmul_prepacked
from tessera.relay.visitor import iter_calls
from tessera.target import Target
from tessera.target.simd import float32_lanes
from tessera.transform import PassContext
from tessera.transform.infer_type import infer_function
from tessera.transform.pack_gemm_weights import pack_gemm_weights
from tessera.testing.isa import require_level


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w_ragged": rng.standard_normal((40, 37), dtype=np.float32),  # n ragged against every NR
            "w_dense": rng.standard_normal((20, 40), dtype=np.float32),  # dense: (N, K), transposed at compile time
            "w_deep": rng.standard_normal((300, 33), dtype=np.float32),  # k across K blocks
            "bias": rng.standard_normal((20,), dtype=np.float32)}


def model() -> tuple[relay.Function, list[tuple[int, ...]]]:
    """Products against constant weights: 2-d and batched A (batch folded into rows), a dense layer
    (its transposed weight), a fused bias + relu epilogue, and one product with too few rows to pack."""
    w = {name: relay.const(v) for name, v in weights().items()}
    shapes = [(2, 13, 40), (9, 40), (11, 300), (3, 40)]
    v = [relay.Var(f"x{i}", relay.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    outs = (
        matmul.matmul(v[0], w["w_ragged"]),
        elemwise_activation.relu(elemwise.add(matmul.dense(v[1], w["w_dense"]), w["bias"])),
        matmul.matmul(v[2], w["w_deep"]),
        matmul.matmul(v[3], w["w_ragged"]),  # 3 rows: the plain schedule, weight left as it is
    )
    return relay.Function(v, relay.Tuple(outs)), shapes


def reference(args: list[np.ndarray]) -> list[np.ndarray]:
    w = {name: x.astype(np.float64) for name, x in weights().items()}
    a = [x.astype(np.float64) for x in args]
    return [a[0] @ w["w_ragged"], np.maximum(a[1] @ w["w_dense"].T + w["bias"], 0), a[2] @ w["w_deep"],
            a[3] @ w["w_ragged"]]


def packed_calls(func: relay.Function, target: str) -> list[relay.Call]:
    func = pack_gemm_weights(infer_function(func), Target(target))
    return [c for c in iter_calls(func) if c.op is matmul_prepacked]


@pytest.mark.parametrize("target", ["c -mcpu=x86-64-v3", "c -mcpu=x86-64-v4"])
def test_constant_weights_become_panels_of_the_default_kernels_width(target):
    a = relay.Var("a", relay.TensorType((2, 13, 40), "float32"))
    w = weights()["w_ragged"]
    (call,) = packed_calls(relay.Function([a], matmul.matmul(a, relay.const(w))), target)
    nr = 2 * float32_lanes(Target(target))  # 16 for AVX2's 6x16, 32 for AVX-512's 8x32 and 12x32
    packed = call.args[1].data
    assert packed.shape == (-(-37 // nr), 40, nr) and call.attrs.columns == 37
    np.testing.assert_array_equal(packed, pack_b_panels(w, nr))
    np.testing.assert_array_equal(unpack_b_panels(packed, 37), w)
    assert call.checked_type_ == relay.TensorType((2, 13, 37), "float32")


@pytest.mark.parametrize("target", ["c -mcpu=x86-64-v3", "c -mcpu=x86-64", "c -mcpu=cortex-m7"])
def test_products_the_microkernel_does_not_run_on_a_constant_keep_their_weight(target):
    a = relay.Var("a", relay.TensorType((24, 40), "float32"))
    b = relay.Var("b", relay.TensorType((40, 16), "float32"))  # not a constant
    batched = relay.const(np.ones((2, 40, 16), np.float32))  # a batch of weights: not packed
    w = relay.const(weights()["w_ragged"])
    func = relay.Function([a, b], relay.Tuple((matmul.matmul(a, b), matmul.matmul(a, batched))))
    assert packed_calls(func, target) == []
    # the same product on a constant weight is packed where the microkernel runs
    assert len(packed_calls(relay.Function([a], matmul.matmul(a, w)), target)) == (target.endswith("v3"))


@pytest.mark.parametrize("lead", [(1,), (3,), (2, 3)])
def test_few_rows_read_the_packed_panels_which_the_threads_share(lead):
    """Fewer rows than the microkernel takes (a classifier's one): on AVX-512 packed all the same, and each
    micro-panel is a register tile of sums while k runs down it; the panels are the parallel loop. AVX2
    keeps the plain schedule (gemm.prepacked_panel_width says why)."""
    target = "c -mcpu=x86-64-v4"
    a = relay.Var("a", relay.TensorType((*lead, 40), "float32"))
    w = weights()["w_ragged"]
    func = relay.Function([a], matmul.matmul(a, relay.const(w)))
    assert len(packed_calls(func, target)) == 1 and packed_calls(func, "c -mcpu=x86-64-v3") == []
    x = np.random.default_rng(5).standard_normal((*lead, 40)).astype(np.float32)
    with PassContext(config={SHAPE_CLASSES_CONFIG: False}):
        lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    assert "matmul_panels_tile[" in "".join(lib.c_sources.values())
    require_level(target.split("=")[1])
    one, two = (tessera.GraphModule(lib, num_threads=n, adaptive_threads=False)(x)[0] for n in (1, 2))
    np.testing.assert_allclose(one, x @ w, rtol=1e-5, atol=1e-5)
    assert np.array_equal(one, two)


@pytest.mark.parametrize("target", ["c -mcpu=x86-64-v3", "c"])
def test_models_with_packed_weights_match_numpy(target):
    if target.endswith("v3"):
        require_level("x86-64-v3")
    func, shapes = model()
    with PassContext(config={SHAPE_CLASSES_CONFIG: False}):  # one kernel per product, to count their entries
        lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    source = "".join(calling_units(lib.c_sources).values())
    nr = 2 * (float32_lanes(Target(target)) or 0)
    if nr in (16, 32):  # AVX2: 6x16 for all three; AVX-512: 8x32 for 26 rows, 12x32 for 9 and 11
        entries = re.findall(rf"(void )?ts_sgemm_(\d+)x{nr}_prepacked(?:_fused)?\(", source)
        calls = [mr for declaration, mr in entries if not declaration]  # a declaration per C unit
        assert sorted(calls) == (["6"] * 3 if nr == 16 else ["12", "12", "8"])
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    for got, want in zip(lib(*args), reference(args)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_native_avx512_packed_weights_match_numpy():
    require_level("x86-64-v4")
    func, shapes = model()
    lib = tessera.build(relay.IRModule.from_expr(func), target="c -mcpu=x86-64-v4")
    source = "".join(lib.c_sources.values())
    assert "ts_sgemm_8x32_prepacked(" in source and "ts_sgemm_12x32_prepacked(" in source
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    for got, want in zip(lib(*args), reference(args)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("target", ["c -mcpu=x86-64", "c -mcpu=x86-64-v3"])
def test_the_op_runs_without_the_microkernel_too(target):
    """Built by hand for a target without the microkernel (or with too few rows), the op reads B through
    its panels in plain loops."""
    if target.endswith("v3"):
        require_level("x86-64-v3")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((24, 21), dtype=np.float32)
    x = rng.standard_normal((5, 24), dtype=np.float32)
    a = relay.Var("a", relay.TensorType(x.shape, "float32"))
    func = relay.Function([a], matmul_prepacked(a, relay.const(pack_b_panels(w, 16)), columns=21))
    lib = tessera.build(relay.IRModule.from_expr(func), target=target)
    assert "ts_sgemm_" not in "".join(lib.c_sources.values())
    np.testing.assert_allclose(lib(x)[0], x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_columns_must_fill_the_panels():
    a = relay.Var("a", relay.TensorType((9, 24), "float32"))
    panels = relay.const(np.zeros((2, 24, 16), np.float32))
    with pytest.raises(TypeInferenceError, match=r"columns=33 does not fill 2 micro-panels of 16: expected 17 to 32"):
        infer_function(relay.Function([a], matmul_prepacked(a, panels, columns=33)))
    with pytest.raises(TypeInferenceError, match="inner dimensions differ"):
        infer_function(relay.Function([a], matmul_prepacked(a, relay.const(np.zeros((2, 8, 16), np.float32)),
                                                            columns=20)))
