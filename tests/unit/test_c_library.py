"""Library functions (the GEMM, row kernels): one library unit per host module, inline elsewhere (codegen/c_library)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.codegen.c_library import (LIBRARY_MACRO, _prototype, calling_units, gemm_function, is_library_unit,
                                       library_source, row_function)
from tessera.codegen.c_source import CodeGenC
from tessera.op import elemwise as ew
from tessera.op.annotation import on_target
from tessera.op.nn import conv, matmul
from tessera.op.nn.conv_depthwise import DEPTHWISE_SYMBOL
from tessera.op.nn.gemm import GemmKernel
from tessera.op.nn.softmax_rows import SOFTMAX_ROWS
from tessera.testing.isa import require_level

AVX2 = "c -mcpu=x86-64-v3"  # the 6x16 GEMM on any x86-64 that builds it (runs need AVX2: require_level)
KERNEL = GemmKernel(6, 16)


def model(channels: int, rows: int) -> relay.Function:
    """A 3x3 convolution and a matrix product: two kernels calling two GEMM entries."""
    rng = np.random.default_rng(channels)
    x = relay.Var("x", relay.TensorType((1, channels, 12, 12), "float32"))
    a = relay.Var("a", relay.TensorType((rows, 64), "float32"))
    w = relay.const(rng.standard_normal((32, channels, 3, 3)).astype(np.float32))
    b = relay.const(rng.standard_normal((64, 48)).astype(np.float32))
    y = conv.conv2d(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    return relay.Function((x, a), relay.Tuple([y, matmul.matmul(a, b)]))


def _split(lib) -> tuple[str, dict[str, str]]:
    """(the kernels' units joined, the library units by name)."""
    sources = lib.c_sources
    kernels = "\n".join(calling_units(sources).values())
    return kernels, {name: text for name, text in sources.items() if is_library_unit(name)}


def test_host_kernels_declare_the_gemm_and_one_library_unit_defines_it():
    lib = tessera.build(relay.IRModule.from_expr(model(16, 40)), target=AVX2)
    kernels, library = _split(lib)
    assert list(library) == ["kernels_library.c"]
    text = library["kernels_library.c"]
    for entry in ("", "_prepacked", "_prepacked_a", "_planes"):  # every entry, whichever the model calls
        assert f"{LIBRARY_MACRO} void ts_sgemm_6x16{entry}(" in text
    assert "_mm256_fmadd_ps" in text and "#include <immintrin.h>" in text
    # the kernels' units call and declare, but neither define the GEMM nor parse the ISA headers
    assert re.search(r"^void ts_sgemm_6x16_\w+\(", kernels, re.MULTILINE)
    assert "immintrin" not in kernels and "ts_sgemm_6x16_tile" not in kernels and LIBRARY_MACRO not in kernels


def test_the_library_unit_is_the_same_for_another_model_so_the_cache_serves_it():
    first = _split(tessera.build(relay.IRModule.from_expr(model(16, 40)), target=AVX2))
    second = _split(tessera.build(relay.IRModule.from_expr(model(24, 7)), target=AVX2))
    assert first[0] != second[0] and first[1] == second[1]


def test_a_host_module_links_and_computes_with_its_library_unit():
    require_level("x86-64-v3")
    rng = np.random.default_rng(3)
    func = model(16, 40)
    x, a = rng.standard_normal((1, 16, 12, 12), dtype=np.float32), rng.standard_normal((40, 64), dtype=np.float32)
    got = tessera.build(relay.IRModule.from_expr(func), target=AVX2)(x, a)
    want = tessera.build(relay.IRModule.from_expr(func), target="c -mcpu=x86-64")(x, a)  # no GEMM: no AVX2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_two_pieces_that_both_call_the_gemm_link_into_one_library():
    """Each piece's C module has a library unit defining the GEMM; its functions are weak, so one copy links."""
    rng = np.random.default_rng(5)
    a = relay.Var("a", relay.TensorType((40, 64), "float32"))
    b = [relay.const(rng.standard_normal(shape).astype(np.float32)) for shape in ((64, 48), (48, 32))]
    first = on_target(matmul.matmul(a, b[0]), "one")
    second = on_target(matmul.matmul(ew.relu(first), b[1]), "two")
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((a,), second)),
                        target="one: c -mcpu=x86-64-v3; two: c -mcpu=x86-64-v3")
    _, library = _split(lib)
    assert sorted(library) == ["one_kernels_library.c", "two_kernels_library.c"]
    assert all(f"{LIBRARY_MACRO} void ts_sgemm_6x16_prepacked(" in text for text in library.values())
    require_level("x86-64-v3")
    x = rng.standard_normal((40, 64), dtype=np.float32)
    w = [c.data for c in b]
    want = np.maximum(x.astype(np.float64) @ w[0], 0) @ w[1]
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)


def test_inline_units_define_library_functions_static_in_first_use_order():
    gen = CodeGenC()
    gen.declare_library(gemm_function(KERNEL, KERNEL.prepacked_symbol))
    gen.declare_library(row_function(SOFTMAX_ROWS))
    inline = gen.source()
    assert f"static void {KERNEL.prepacked_symbol}(" in inline and f"static void {SOFTMAX_ROWS}(" in inline
    assert inline.index(KERNEL.prepacked_symbol) < inline.index(SOFTMAX_ROWS) and LIBRARY_MACRO not in inline
    assert f"static void {KERNEL.planes_symbol}(" not in inline  # only the entries called (-Wall: unused statics)
    declared = gen.source(library_unit=True)
    assert f"void {KERNEL.prepacked_symbol}(" in declared and "{" not in declared.split(KERNEL.prepacked_symbol)[1][:200]
    assert "immintrin" not in declared and "ts_exp_float32" not in declared


def test_helpers_a_kernel_uses_itself_stay_in_its_unit():
    gen = CodeGenC()
    gen.declare_library(row_function(SOFTMAX_ROWS))  # brings ts_exp_float32 along
    assert "ts_exp_float32" not in gen.source(library_unit=True)
    exp = gen.declare_helper("exp", "float32")  # ... which a kernel now calls too
    assert "ts_exp_float32(float x)" in gen.source(library_unit=True) and exp == "ts_exp_float32"


def test_the_depthwise_kernel_stays_in_its_callers_unit_for_gcc_to_specialise():
    gen = CodeGenC()
    gen.declare_library(row_function(DEPTHWISE_SYMBOL))
    gen.declare_library(row_function(SOFTMAX_ROWS))
    declared = gen.source(library_unit=True)
    assert f"static void {DEPTHWISE_SYMBOL}(" in declared and f"\nvoid {SOFTMAX_ROWS}(" in declared
    assert [fn.symbol for fn in gen.library_functions] == [SOFTMAX_ROWS]
    assert "immintrin" not in declared  # GCC vector extensions, no intrinsics


def test_library_source_is_deterministic_and_needs_a_static_definition():
    functions = [row_function(SOFTMAX_ROWS), gemm_function(KERNEL, KERNEL.symbol)]
    assert library_source(functions) == library_source(reversed(functions))
    with pytest.raises(ValueError, match="no `static void ts_missing"):
        _prototype("void ts_missing(int x) { }", "ts_missing")
