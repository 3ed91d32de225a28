"""Operand contracts (issue 14): out-of-range gather/scatter indices and integer
division by zero are errors, at compile time for constants and through kernel
status codes at run time, in both executors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import te
from tessera.backend.aot.runner import MlfModel
from tessera.codegen.c_source import CodeGenC
from tessera.crt import INCLUDE_DIR
from tessera.crt.status import Status, describe
from tessera.errors import CompileError, InvalidValueError, KernelFailure
from tessera.frontend import from_onnx
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.printer import primfunc_str

from .test_semantics import check_against_ort, make_model, ort_outputs, vi

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
X23 = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_status_codes_match_the_c_header():
    header = (INCLUDE_DIR / "tessera" / "c_runtime_api.h").read_text()
    in_c = {name: int(value) for name, value in re.findall(r"\b(TS_(?:OK|ERROR_\w+)) = (-?\d+)", header)}
    assert in_c == {s.c_name: s.value for s in Status}
    assert describe(-6) == "index out of range (TS_ERROR_INDEX_OUT_OF_RANGE)" and describe(-99) == "unknown status -99"


# ------------------------------------------------------------- run-time indices
def _indexed(op_type: str, **attrs: object) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(model, feeds in range with negative indices, the same feeds with one index out of range)."""
    node = helper.make_node
    if op_type == "Gather":
        model = make_model([node("Gather", ["x", "i"], ["y"], axis=1)], [vi("x", F, [2, 3]), vi("i", I64, [2])],
                           [vi("y", F, None)])
        return model, {"x": X23, "i": np.array([0, -3])}, {"x": X23, "i": np.array([0, 3])}
    if op_type == "GatherElements":
        model = make_model([node("GatherElements", ["x", "i"], ["y"], axis=1)],
                           [vi("x", F, [2, 3]), vi("i", I64, [2, 1])], [vi("y", F, None)])
        return model, {"x": X23, "i": np.array([[-1], [2]])}, {"x": X23, "i": np.array([[-4], [2]])}
    if op_type == "GatherND":
        model = make_model([node("GatherND", ["x", "i"], ["y"])], [vi("x", F, [2, 3]), vi("i", I64, [2, 2])],
                           [vi("y", F, None)])
        return model, {"x": X23, "i": np.array([[0, -1], [-2, 2]])}, {"x": X23, "i": np.array([[0, 1], [2, 0]])}
    upd = np.full((2, 1), 9.0, np.float32)
    if op_type == "ScatterElements":
        model = make_model([node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)],
                           [vi("x", F, [2, 3]), vi("i", I64, [2, 1]), vi("u", F, [2, 1])], [vi("y", F, None)])
        return (model, {"x": X23, "i": np.array([[-1], [0]]), "u": upd},
                {"x": X23, "i": np.array([[1], [3]]), "u": upd})
    if op_type == "ScatterND":
        model = make_model([node("ScatterND", ["x", "i", "u"], ["y"])],
                           [vi("x", F, [2, 3]), vi("i", I64, [1, 2]), vi("u", F, [1])], [vi("y", F, None)])
        u = np.ones(1, np.float32)
        return model, {"x": X23, "i": np.array([[-2, -1]]), "u": u}, {"x": X23, "i": np.array([[0, -4]]), "u": u}
    assert op_type == "ReverseSequence"
    model = make_model([node("ReverseSequence", ["x", "l"], ["y"], time_axis=1, batch_axis=0)],
                       [vi("x", F, [2, 3]), vi("l", I64, [2])], [vi("y", F, None)])
    return model, {"x": X23, "l": np.array([0, 3])}, {"x": X23, "l": np.array([1, 4])}


INDEXED = ["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "ReverseSequence"]


def _build(model: onnx.ModelProto, executor: str = "graph"):
    mod, params = from_onnx(model)
    if executor == "aot":
        return tessera.build(mod, params=params, executor="aot", mod_name="m")
    return tessera.build(mod, params=params)


def _args(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [feeds[i.name] for i in model.graph.input]


@pytest.mark.parametrize("op_type", INDEXED)
def test_out_of_range_run_time_index_is_an_error_not_a_clamp(op_type: str):
    model, good, bad = _indexed(op_type)
    check_against_ort(model, good)  # negative indices in [-n, -1] count from the end
    refused_by_ort = r"(?i)out of (data bounds|range)|invalid ind(ex|ice)|invalid sequence length"
    with pytest.raises(Exception, match=refused_by_ort):
        ort_outputs(model, bad)
    lib = _build(model)
    with pytest.raises(KernelFailure, match=r"kernel tsgen_default_fused_\w+: index out of range "
                                            r"\(TS_ERROR_INDEX_OUT_OF_RANGE\)") as err:
        lib(*_args(model, bad))
    assert err.value.status == Status.INDEX_OUT_OF_RANGE
    np.testing.assert_allclose(lib(*_args(model, good))[0], ort_outputs(model, good)[0])  # the module still runs


@pytest.mark.parametrize("op_type", INDEXED)
def test_out_of_range_constant_index_is_refused_at_compile_time(op_type: str):
    model, _, bad = _indexed(op_type)
    index_name = "l" if op_type == "ReverseSequence" else "i"
    model.graph.initializer.append(onnx.numpy_helper.from_array(bad[index_name], index_name))
    expected = {
        "Gather": r"index 3 is out of range for axis 1 of size 3 \(valid: -3..2\)",
        "GatherElements": r"index -4 is out of range for axis 1 of size 3 \(valid: -3..2\)",
        "GatherND": r"index 2 is out of range for axis 0 of size 2 \(valid: -2..1\)",
        "ScatterElements": r"index 3 is out of range for axis 1 of size 3 \(valid: -3..2\)",
        "ScatterND": r"index -4 is out of range for axis 1 of size 3 \(valid: -3..2\)",
        "ReverseSequence": r"sequence length 4 is out of range for time axis 1 of size 3 \(valid: 0..3\)",
    }[op_type]
    with pytest.raises(InvalidValueError, match=rf"node '{op_type}_0' \({op_type}, opset 17\): {expected}"):
        from_onnx(model)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint64"])
def test_indices_of_every_integer_dtype_are_checked(dtype: str):
    from tessera import relay
    from tessera.op import transform_gather as tg

    x = relay.Var("x", relay.TensorType((200,), "float32"))
    i = relay.Var("i", relay.TensorType((2,), dtype))
    lib = tessera.build(relay.IRModule.from_expr(relay.Function((x, i), tg.take(x, i, axis=0))))
    data = np.arange(200, dtype=np.float32)
    last = min(199, np.iinfo(dtype).max)
    assert lib(data, np.array([0, last], dtype))[0].tolist() == [0.0, float(last)]
    if dtype.startswith("int"):
        assert lib(data, np.array([-1, -2], dtype))[0].tolist() == [199.0, 198.0]
    if dtype != "int8":  # every int8 value is a valid index of 200 elements
        with pytest.raises(KernelFailure, match="index out of range"):
            lib(data, np.array([0, 200 if dtype != "uint8" else 255], dtype))


def test_index_check_costs_one_test_per_index_not_per_output_element():
    x = te.placeholder((100, 50), "float32", "x")
    idx = te.placeholder((3,), "int64", "idx")
    from tessera.op.schedule_context import ScheduleContext
    from tessera.op.transform_gather import TakeAttrs, _take_compute
    from tessera.relay.ty import TensorType
    from tessera.target import Target

    out = _take_compute([x, idx], TakeAttrs(axis=0), TensorType((3, 50), "float32"), ScheduleContext(Target("c")))
    gen = CodeGenC()
    gen.add_function(te.lower("tsgen_test_take", [x, idx], [out]))
    c = gen.source()
    assert c.count("return TS_ERROR_INDEX_OUT_OF_RANGE;") == 1
    assert "for (int32_t c0 = 0; c0 < 3; ++c0) {" in c  # the check loops over the 3 indices
    assert '#include "tessera/c_runtime_api.h"' in c


def test_segment_reports_the_failing_kernel_among_several():
    node = helper.make_node
    model = make_model(
        [node("Gather", ["x", "i"], ["a"], axis=1), node("Softmax", ["a"], ["b"]),
         node("Gather", ["b", "j"], ["y"], axis=0)],
        [vi("x", F, [2, 3]), vi("i", I64, [2]), vi("j", I64, [1])], [vi("y", F, None)])
    lib = _build(model)
    graph = json.loads(lib.graph_json)
    kernels = [n["func"] for n in graph["nodes"] if n["op"] == "kernel"]
    assert len(kernels) == 3 and [len(s["nodes"]) for s in graph["segments"]] == [3]  # one C call runs all three
    lib(X23, np.array([0, 1]), np.array([-2]))
    with pytest.raises(KernelFailure, match=f"kernel {kernels[2]}: index out of range") as err:
        lib(X23, np.array([0, 1]), np.array([2]))
    assert err.value.kernel == kernels[2]
    with pytest.raises(KernelFailure, match=f"kernel {kernels[0]}: index out of range"):
        lib(X23, np.array([0, 5]), np.array([0]))


def test_aot_run_reports_status_and_kernel_and_metadata_lists_them(tmp_path):
    model, good, bad = _indexed("Gather")
    lib = _build(model, "aot")
    np.testing.assert_allclose(lib.run_host(_args(model, good))[0], ort_outputs(model, good)[0])
    with pytest.raises(KernelFailure, match=r"model m: index out of range \(TS_ERROR_INDEX_OUT_OF_RANGE\) "
                                            r"in kernel tsgen_m_fused_take"):
        lib.run_host(_args(model, bad))
    (kernel,) = lib.metadata()["kernels"]
    assert kernel["error_statuses"] == [Status.INDEX_OUT_OF_RANGE]
    loaded = MlfModel(lib.export_library(tmp_path / "m.tar"))
    assert loaded.signature.failure(-6).kernel == "tsgen_m_fused_take"


# ------------------------------------------------------------ division by zero
def _divide(op_type: str, **attrs: object) -> onnx.ModelProto:
    return make_model([helper.make_node(op_type, ["a", "b"], ["y"], **attrs)], [vi("a", I32, [3]), vi("b", I32, [3])],
                      [vi("y", I32, None)])


@pytest.mark.parametrize("op_type, attrs, kernel", [
    ("Div", {}, "divide"), ("Mod", {}, "floor_mod"), ("Mod", {"fmod": 1}, "trunc_mod"),
])
def test_integer_division_by_zero_is_an_error(op_type: str, attrs: dict, kernel: str):
    model = _divide(op_type, **attrs)
    a, b = np.array([7, -7, 5], np.int32), np.array([2, 3, -1], np.int32)
    check_against_ort(model, {"a": a, "b": b})
    lib = _build(model)
    with pytest.raises(KernelFailure, match=rf"kernel tsgen_default_fused_{kernel}: integer division by zero"):
        lib(a, np.array([2, 0, 1], np.int32))
    model.graph.input.pop()
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, 0, 1], np.int32), "b"))
    with pytest.raises(InvalidValueError, match=rf"node '{op_type}_0' \({op_type}, opset 17\): integer division by zero"):
        from_onnx(model)


def test_integer_division_by_zero_in_the_aot_executor():
    lib = _build(_divide("Div"), "aot")
    with pytest.raises(KernelFailure, match="integer division by zero .* in kernel tsgen_m_fused_divide"):
        lib.run_host([np.ones(3, np.int32), np.zeros(3, np.int32)])


def test_integer_division_by_zero_on_a_cortex_m_board():
    mod, params = from_onnx(_divide("Div"))
    lib = tessera.build(mod, target="c -mcpu=cortex-m4", params=params, executor="aot", mod_name="m")
    a, b = np.array([7, -7, 5], np.int32), np.array([2, 2, -1], np.int32)
    np.testing.assert_array_equal(lib.run_board("mps2-an386", [a, b])[0][0], [3, -3, -5])
    with pytest.raises(KernelFailure, match="integer division by zero .* in kernel tsgen_m_fused_divide"):
        lib.run_board("mps2-an386", [a, np.array([2, 0, 1], np.int32)])


def test_float_division_by_zero_stays_ieee():
    model = make_model([helper.make_node("Div", ["a", "b"], ["y"])], [vi("a", F, [2]), vi("b", F, [2])],
                       [vi("y", F, None)])
    (y,) = _build(model)(np.array([1.0, -1.0], np.float32), np.zeros(2, np.float32))
    assert np.isposinf(y[0]) and np.isneginf(y[1])


# ---------------------------------------------------------- lowering and codegen
def test_check_reading_a_reduction_keeps_it_out_of_the_epilogue():
    """argmax -> take: the take's index check reads the argmax, so the argmax may not be
    computed in the output as the take's epilogue (the check would run before it)."""
    x = te.placeholder((3, 4), "float32", "x")
    data = te.placeholder((4,), "int64", "data")
    r = te.reduce_axis(4, "r")
    best = te.compute((3,), lambda i: te.argmax(x[i, r.var], r), name="best")
    from tessera.op.transform_gather import index_check, wrap_index

    out = te.compute((3,), lambda i: data[(wrap_index(best[i], 4),)], name="pick",
                     checks=(index_check(best, 4),))
    text = primfunc_str(te.lower("tsgen_test_pick", [x, data], [out]))
    assert "best_buf" in text and text.index("best_pos") < text.index("return")
    model = make_model([helper.make_node("ArgMax", ["x"], ["k"], axis=1, keepdims=0),
                        helper.make_node("Gather", ["d", "k"], ["y"])],
                       [vi("x", F, [3, 4]), vi("d", I64, [4])], [vi("y", I64, None)])
    check_against_ort(model, {"x": np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32),
                              "d": np.array([10, 20, 30, 40], np.int64)})


def test_early_return_frees_run_time_workspace():
    x = te.placeholder((4,), "int32", "x")
    staged = te.compute((4,), lambda i: E.add(x[i], 1), name="staged", materialize=True)
    ok = te.check((4,), lambda i: E.ne(staged[i], E.const(0, "int32")), Status.DIVIDE_BY_ZERO)
    out = te.compute((4,), lambda i: E.add(staged[i], 2), name="out", checks=(ok,))
    gen = CodeGenC()
    gen.add_function(te.lower("tsgen_test_free", [x], [out]))
    c = gen.source()
    assert re.search(r"TSBackendFreeWorkspace\((\w+)\);\n\s+return TS_ERROR_DIVIDE_BY_ZERO;", c)


def test_return_inside_a_parallel_loop_is_refused():
    i = E.Var("i")
    buf = tessera.tir.buffer.Buffer("out", (4,), "int32")
    body = S.For(i, E.IntImm(4), S.Return(E.IntImm(Status.INDEX_OUT_OF_RANGE)), S.ForKind.PARALLEL)
    with pytest.raises(CompileError, match="cannot return from inside a parallel loop"):
        CodeGenC().add_function(S.PrimFunc("tsgen_test_parallel", (buf,), body, 0))


def test_semantics_doc_example_runs():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "semantics.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    exec(compile(example, "docs/semantics.md", "exec"), {})
