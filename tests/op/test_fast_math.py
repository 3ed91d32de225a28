"""The polynomial float32 exp, tanh, erf and 1 + exp (sigmoid, SiLU) of generated kernels (codegen/c_fast_math.py)
against float64 NumPy over a dense sweep of float32 inputs: the bounds its docstring
states, the special values, and the vector code gcc makes of them."""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import relay
from tessera.codegen import c_fast_math
from tessera.frontend.onnx import from_onnx
from tessera.op import elemwise as ew
from tessera.testing import tail_blocks

REL_BOUND = 2.5e-7  # the docstring's max relative error, for results of normal magnitude
SUBNORMAL_BOUND = 1.5e-45  # one subnormal step, where the result itself is subnormal
TINY = float(np.finfo(np.float32).tiny)


def _sweep() -> np.ndarray:
    """Every 1024th float32 bit pattern of each sign (8192 per binade), and the edge cases."""
    positive = np.arange(0, 0x7F800000, 1 << 10, dtype=np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, 88.72, 88.73, -87.4,
                      -103.9, -104.5, 0.625, -0.625, 1.0, -1.0, 4.0, -4.0, 9.0, -9.0, 3.4e38, -3.4e38], np.float32)
    return np.concatenate([positive, -positive, edges])


def _run(op: Callable[[relay.Expr], relay.Expr], x: np.ndarray) -> np.ndarray:
    v = relay.Var("x", relay.TensorType(x.shape, "float32"))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((v,), op(v))))
    return lib(x)[0]


REFERENCES: dict[str, tuple[Callable[[relay.Expr], relay.Expr], Callable[[np.ndarray], np.ndarray]]] = {
    "exp": (ew.exp, np.exp),
    "tanh": (ew.tanh, np.tanh),
    "erf": (ew.erf, np.vectorize(math.erf, otypes=[np.float64])),
}


@pytest.fixture(scope="module")
def sweep() -> np.ndarray:
    return _sweep()


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_polynomial_math_meets_its_stated_bounds(name: str, sweep: np.ndarray) -> None:
    op, reference = REFERENCES[name]
    got = _run(op, sweep).astype(np.float64)
    with np.errstate(all="ignore"):
        ref = reference(sweep.astype(np.float64))
        ref32 = ref.astype(np.float32).astype(np.float64)  # overflow and underflow as float32 has them
    normal = np.isfinite(ref32) & (np.abs(ref32) >= TINY)
    rel = np.abs(got[normal] - ref[normal]) / np.abs(ref[normal])
    worst = int(np.argmax(rel))
    assert rel[worst] <= REL_BOUND, f"{name}({sweep[normal][worst]!r}): relative error {rel[worst]:.3g}"
    subnormal = np.isfinite(ref32) & (np.abs(ref32) < TINY)
    assert np.all(np.abs(got[subnormal] - ref[subnormal]) <= SUBNORMAL_BOUND)
    special = ~np.isfinite(ref32)  # NaN in, NaN out; infinities exactly
    np.testing.assert_array_equal(got[special], ref32[special])


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_special_values_are_exact(name: str) -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -200.0], np.float32)
    got = _run(REFERENCES[name][0], x)
    expected = {
        "exp": [1.0, 1.0, np.inf, 0.0, np.nan, np.inf, 0.0],
        "tanh": [0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0],
        "erf": [0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0],
    }[name]
    np.testing.assert_array_equal(got, np.array(expected, np.float32))
    np.testing.assert_array_equal(np.signbit(got[:2]), np.signbit(np.array(expected[:2], np.float32)))


def test_kernels_call_the_helpers_not_libm() -> None:
    x = relay.Var("x", relay.TensorType((64,), "float32"))
    body = ew.add(ew.add(ew.exp(x), ew.tanh(x)), ew.erf(x))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((x,), body)))
    source = "\n".join(lib.c_sources.values())
    assert not re.search(r"\b(expf|tanhf|erff)\(", source)
    for kind in ("exp", "tanh", "erf"):
        assert f"ts_{kind}_float32(" in source
    # helpers come before their callers
    assert source.index("float ts_exp_float32(") < source.index("float ts_erf_float32(")
    assert source.index("float ts_one_plus_exp_float32(") < source.index("float ts_tanh_float32(")


@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64-v4"])
def test_gcc_vectorises_loops_of_the_helpers(march: str, tmp_path) -> None:
    """Compiled for AVX2 and for AVX-512: each loop calling a helper becomes vector code."""
    loops = "\n".join(
        f"void run_{k}(const float* restrict x, float* restrict y, int n) "
        f"{{ for (int i = 0; i < n; ++i) y[i] = ts_{k}_float32(x[i]); }}"
        for k in (*c_fast_math.INTRINSICS, "one_plus_exp", "silu_denominator"))
    src = tmp_path / "fast_math.c"
    src.write_text("#include <math.h>\n#include <stdint.h>\n" + "\n".join(c_fast_math.SOURCES.values())
                   + "\n" + loops + "\n")
    result = subprocess.run(["gcc", "-O3", f"-march={march}", "-std=gnu11", "-c", str(src), "-o",
                             str(tmp_path / "fast_math.o"), "-fopt-info-vec-optimized"],
                            capture_output=True, text=True, check=True)
    lines = loops.count("\n") + 1
    first = src.read_text().count("\n") + 1 - lines
    vectorised = {int(m) for m in re.findall(r"fast_math\.c:(\d+):\d+: optimized: loop vectorized", result.stderr)}
    assert vectorised >= set(range(first, first + lines)), result.stderr


# ---------------------------------------------- 1 + exp(y): sigmoid and SiLU (ts_one_plus_exp_float32)
SIGMOIDS: dict[str, tuple[Callable[[relay.Expr], relay.Expr], Callable[[np.ndarray], np.ndarray]]] = {
    "sigmoid": (ew.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "silu": (ew.silu, lambda x: x / (1 + np.exp(-x))),
}
OVERFLOW = 88.72  # e^-x overflows float32 below x = -88.72: sigmoid and SiLU are then 0 (-0 for SiLU)


@pytest.mark.parametrize("name", sorted(SIGMOIDS))
def test_sigmoids_through_one_plus_exp_meet_the_exp_bound(name: str, sweep: np.ndarray) -> None:
    """Max relative error 2.5e-7 (REL_BOUND) wherever e^-x is finite; below -88.72 the results, all under
    3e-37 in magnitude, are 0, as they were with 1 / (1 + exp(-x)) and are in onnxruntime."""
    op, reference = SIGMOIDS[name]
    got = _run(op, sweep).astype(np.float64)
    with np.errstate(all="ignore"):
        ref = reference(sweep.astype(np.float64))
        ref32 = ref.astype(np.float32).astype(np.float64)
    finite_exp = sweep > -OVERFLOW
    normal = finite_exp & np.isfinite(ref32) & (np.abs(ref32) >= TINY)
    rel = np.abs(got[normal] - ref[normal]) / np.abs(ref[normal])
    worst = int(np.argmax(rel))
    assert rel[worst] <= REL_BOUND, f"{name}({sweep[normal][worst]!r}): relative error {rel[worst]:.3g}"
    subnormal = finite_exp & np.isfinite(ref32) & (np.abs(ref32) < TINY)
    assert np.all(np.abs(got[subnormal] - ref[subnormal]) <= SUBNORMAL_BOUND)
    below = (sweep <= -OVERFLOW) & ~np.isinf(sweep)
    assert np.all(got[below] == 0.0) and np.all(np.abs(ref[below]) < 3e-37)


def test_sigmoid_and_silu_special_values() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -200.0, 80.5, -80.5], np.float32)
    e80 = np.exp(np.float64(-80.5))
    expected = {
        "sigmoid": [0.5, 0.5, 1.0, 0.0, np.nan, 1.0, 0.0, 1.0, e80],
        "silu": [0.0, -0.0, np.inf, np.nan, np.nan, 100.0, -0.0, 80.5, -80.5 * e80],
    }
    for name, (op, _) in SIGMOIDS.items():
        got = _run(op, x)
        want = np.array(expected[name], np.float32)
        np.testing.assert_allclose(got, want, rtol=REL_BOUND, atol=0, equal_nan=True, err_msg=name)
        np.testing.assert_array_equal(np.signbit(got[:2]), np.signbit(want[:2]))


@pytest.mark.parametrize("target", ["c -mcpu=x86-64-v3", "c -mcpu=x86-64-v4"])
def test_sigmoid_kernels_call_one_plus_exp(target: str) -> None:
    """Sigmoid goes through 1 + exp's helper, SiLU (and the efficientnet block's fused SiLU epilogues) through
    its copy that leaves NaN to the numerator, at either ISA level (built, not run: the source is what is
    checked; the sweeps above run both)."""
    x = relay.Var("x", relay.TensorType((64,), "float32"))
    sigmoid = tessera.build(relay.IRModule.from_expr(relay.Function((x,), ew.sigmoid(x))), target=target)
    silu = tessera.build(relay.IRModule.from_expr(relay.Function((x,), ew.silu(x))), target=target)
    mod, params = from_onnx(tail_blocks.efficientnet_block(channels=8, expand=3, size=10))
    block = tessera.build(mod, target=target, params=params)
    sources = {name: "\n".join(lib.c_sources.values()) for name, lib in
               (("sigmoid", sigmoid), ("silu", silu), ("block", block))}
    assert re.search(r"= \(1\.0f / ts_one_plus_exp_float32\(", sources["sigmoid"]), sources["sigmoid"]
    for name in ("silu", "block"):
        calls = re.findall(r"\(([^()]+) / ts_silu_denominator_float32\(\(-\1\)\)\)", sources[name])
        assert calls, sources[name]
        assert "ts_one_plus_exp_float32(" not in sources[name]
    for source in sources.values():
        assert not re.search(r"\b(expf|ts_exp_float32)\(", source)


NANS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FC12345], np.uint32).view(np.float32)


def test_silu_of_nan_is_nan_through_the_numerator() -> None:
    """SiLU's denominator helper turns a NaN argument into a number: the result is NaN because x is, for NaNs
    of either sign and payload, in an elementwise kernel and in a product's fused map."""
    got = _run(ew.silu, np.concatenate([NANS, np.array([1.0, -1.0], np.float32)]))
    assert np.all(np.isnan(got[:5])) and np.all(np.isfinite(got[5:]))
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["g"]),
             helper.make_node("Mul", ["c", "g"], ["y"])]
    graph = helper.make_graph(nodes, "silu_map", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 24])],
                              [numpy_helper.from_array(rng.standard_normal((16, 24)).astype(np.float32), "w")])
    mod, params = from_onnx(helper.make_model(graph))
    lib = tessera.build(mod, params=params)
    assert "ts_silu_denominator_float32((-v))" in "\n".join(lib.c_sources.values())  # the map
    x = rng.standard_normal((8, 16)).astype(np.float32)
    x[:5, 3] = NANS  # rows 0-4 of the product are NaN throughout
    y = lib(x)[0]
    assert np.all(np.isnan(y[:5])) and np.all(np.isfinite(y[5:]))


def test_one_plus_exp_itself_meets_the_exp_bound(sweep: np.ndarray) -> None:
    """1 + exp(x) as the kernels compute it (one helper): relative error <= 2.5e-7, +inf exactly where e^x
    overflows float32, 1 at -inf, NaN for NaN."""
    got = _run(lambda v: ew.add(relay.const(np.float32(1.0)), ew.exp(v)), sweep).astype(np.float64)
    with np.errstate(all="ignore"):
        ref = 1 + np.exp(sweep.astype(np.float64))
        ref32 = ref.astype(np.float32).astype(np.float64)
    finite = np.isfinite(ref32)
    rel = np.abs(got[finite] - ref[finite]) / ref[finite]
    worst = int(np.argmax(rel))
    assert rel[worst] <= REL_BOUND, f"1 + exp({sweep[finite][worst]!r}): relative error {rel[worst]:.3g}"
    np.testing.assert_array_equal(got[~finite], ref32[~finite])
    assert _run(lambda v: ew.add(ew.exp(v), relay.const(np.float32(1.0))), np.array([-np.inf], np.float32))[0] == 1.0
    x = relay.Var("x", relay.TensorType((64,), "float32"))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((x,), ew.add(relay.const(np.float32(1.0)), ew.exp(x)))))
    assert "ts_one_plus_exp_float32(" in "\n".join(lib.c_sources.values())  # the sweep above ran the helper


# ---------------------------------------------- 1 + tanh(u): tanh-GELU (2 / ts_one_plus_exp_float32(-2u))
ONE_PLUS_TANH_BOUND = 3.1e-7  # 1 + exp's 2.5e-7 and the division's half ulp


def test_one_plus_tanh_meets_its_bound_where_tanh_and_one_would_cancel(sweep: np.ndarray) -> None:
    """1 + tanh(u) as the kernels compute it, 2 / (1 + e^(-2u)): relative error <= 3.1e-7 wherever the result is
    a normal float32, including u << 0 where it is tiny and 1 + tanh(u) would lose every digit; 2 at +inf, 0 at
    -inf, NaN for NaN."""
    got = _run(lambda v: ew.add(relay.const(np.float32(1.0)), ew.tanh(v)), sweep).astype(np.float64)
    with np.errstate(all="ignore"):
        wide = sweep.astype(np.float64)
        ref = 2 / (1 + np.exp(-2 * wide))  # = 1 + tanh(u), without float64's own cancellation below u = -19
        ref32 = ref.astype(np.float32).astype(np.float64)
    normal = np.isfinite(sweep) & (ref32 >= TINY)
    rel = np.abs(got[normal] - ref[normal]) / ref[normal]
    worst = int(np.argmax(rel))
    assert rel[worst] <= ONE_PLUS_TANH_BOUND, f"1 + tanh({sweep[normal][worst]!r}): relative error {rel[worst]:.3g}"
    assert np.all(got[sweep < -20] < 1e-17)  # tiny, not 0 from a cancellation (while normal)
    assert np.all(got[np.isfinite(sweep) & (ref32 < TINY)] <= TINY)
    special = _run(lambda v: ew.add(ew.tanh(v), relay.const(np.float32(1.0))),
                   np.array([np.inf, -np.inf, np.nan, 0.0], np.float32))
    np.testing.assert_array_equal(special, np.array([2.0, 0.0, np.nan, 1.0], np.float32))
    x = relay.Var("x", relay.TensorType((64,), "float32"))
    one_plus_tanh = ew.add(relay.const(np.float32(1.0)), ew.tanh(x))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((x,), one_plus_tanh)))
    source = "\n".join(lib.c_sources.values())
    assert "ts_one_plus_exp_float32(" in source and "ts_tanh_float32(" not in source  # the sweep ran that form
