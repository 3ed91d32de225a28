"""Names from a hostile or careless model never reach generated C unchecked.

Every name below is one that onnx.checker and onnxruntime accept. Each model
runs in the graph executor with its inputs set by their real names, and
compiles with the AOT executor to a Model Library Format export that gcc
builds with -Wall -Werror (the header also as C++ and after the standard
headers) and that runs on the host, and on a Cortex-M board, without running
code smuggled in a name. Names the importer refuses are refused by
onnxruntime too.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import tessera
from tessera.backend.aot.runner import MlfModel, include_flags, model_sources
from tessera.errors import ConversionError, TesseraError
from tessera.frontend import from_onnx
from tessera.testing.models import ort_run

# Were the comment around this name closed, the program would print PWNED and stop with status 66.
# (`/**/` instead of spaces: the importer used to turn whitespace into `_`.)
EVIL = 'x*/__attribute__((constructor))static/**/void/**/pwn(void){__builtin_printf("PWNED\\n");__builtin_exit(66);}/*'
STD_HEADERS = ("assert.h", "complex.h", "ctype.h", "errno.h", "float.h", "inttypes.h", "iso646.h", "limits.h",
               "math.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "time.h")


@dataclass(frozen=True)
class Case:
    inputs: tuple[str, ...]
    outputs: tuple[str, str]  # the sum of every input and the weight; minus the first input
    weight: str  # a float initializer (a parameter of the graph executor)
    mod_name: str = "names"
    passthrough: bool = False  # the first input is also a graph output, unchanged


CASES = {
    "injection": Case(
        (EVIL, "a*/b", "/*c", "line\nbreak", "nul\0byte", "#define x 1", "back\\", "tri??/", "tri??=", 'q"uo\'te',
         "cr\rlf", "tab\there"),
        ("*/ out /*", "out\n#include <stdlib.h>\\"), "w*/eight\0"),
    "keywords": Case(
        ("int", "return", "class", "main", "_Bool", "EOF", "linux", "NULL", "params", "workspace", "pool", "inputs",
         "status", "TSGEN_INT_POOL_SIZE", "__x", "_X", "ts_x", "tessera_blob", "asm", "typeof", "I", "errno"),
        ("double", "EOF_1"), "static", mod_name="int"),
    "collisions": Case(
        ("a b", "a_b", "o-1", "o+1", "é", "ü", "输入", "A", "a", " ", "_", "0", "x" * 300, "x" * 300 + "y",
         "a\tb", "a_B", "é" * 40),
        ("a b!", "A B!"), "A_B_1", passthrough=True),
}


def _model(case: Case) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in case.inputs]
    weight = helper.make_tensor(case.weight, TensorProto.FLOAT, [2], [0.5, -1.5])
    nodes, total = [], case.weight
    for k, name in enumerate(case.inputs):
        out = case.outputs[0] if k == len(case.inputs) - 1 else f"{name}+{k}*/"
        nodes.append(helper.make_node("Add", [total, name], [out], name=f"{EVIL} add {k}"))
        total = out
    nodes.append(helper.make_node("Neg", [case.inputs[0]], [case.outputs[1]], name="*/\n#error node"))
    names = [*case.outputs, *(case.inputs[:1] if case.passthrough else [])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in names]
    graph = helper.make_graph(nodes, "g*/\n", inputs, outputs, initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _feed(case: Case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(len(case.inputs))
    return {name: rng.standard_normal(2).astype(np.float32) for name in case.inputs}


@pytest.fixture(params=list(CASES))
def case(request) -> Case:
    return CASES[request.param]


def test_graph_executor_keeps_the_real_names(case):
    model, feed = _model(case), _feed(case)
    mod, params = from_onnx(model)
    gm = tessera.GraphModule(tessera.build(mod, "c", params))
    assert gm.input_names == list(case.inputs)  # round trip: exactly the ONNX names
    for name, value in feed.items():
        gm.set_input(name, value)
    gm.run()
    expected = ort_run(model, feed)
    for k, want in enumerate(expected):
        np.testing.assert_allclose(gm.get_output(k), want, rtol=1e-6)


def _extract(lib, tmp_path: Path) -> tuple[Path, dict]:
    tar = lib.export_library(tmp_path / "model.tar")
    folder = tmp_path / "mlf"
    with tarfile.open(tar) as t:
        t.extractall(folder, filter="data")
    return folder, json.loads((folder / "metadata.json").read_text())


def _gcc(*args: str, cc: str = "gcc") -> None:
    run = subprocess.run([cc, *args], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_model_library_format_compiles_warning_free(case, tmp_path):
    model = _model(case)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, "c", params, executor="aot", mod_name=case.mod_name)
    folder, meta = _extract(lib, tmp_path)
    flags = ["-std=gnu11", "-Wall", "-Werror", *include_flags(folder)]  # GNU C predefines `linux` and `unix`
    for k, source in enumerate(model_sources(folder)):
        _gcc(*flags, "-c", str(source), "-o", str(tmp_path / f"{k}.o"))
    header = folder / "codegen/host/include" / f"tsgen_{case.mod_name}.h"
    after_std = tmp_path / "after_std.c"
    after_std.write_text("".join(f"#include <{h}>\n" for h in STD_HEADERS) + f'#include "{header.name}"\n')
    _gcc("-std=gnu11", "-Wall", "-Werror", "-fsyntax-only", *include_flags(folder), str(after_std))
    _gcc("-x", "c++", "-Wall", "-Werror", "-fsyntax-only", *include_flags(folder), str(after_std), cc="g++")
    # the payload is text in comments, never code: it is gone once the preprocessor drops comments
    for path in [header, *folder.glob("codegen/host/src/*.c")]:
        assert EVIL not in path.read_text()
        cpp = subprocess.run(["gcc", "-E", "-P", *include_flags(folder), str(path)], capture_output=True, text=True)
        assert cpp.returncode == 0 and "((constructor))" not in cpp.stdout and "PWNED" not in cpp.stdout
    # metadata.json keeps the real names and tells which C field holds each
    tensors = meta["inputs"] + meta["outputs"]
    names = [*case.inputs, *case.outputs, *(case.inputs[:1] if case.passthrough else [])]
    assert [t["name"] for t in tensors] == names
    fields = [t["c_name"] for t in tensors]
    assert len({f.upper() for f in fields}) == len(fields)
    text = header.read_text()
    assert all(f"* {f};" in text for f in fields)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(codec="utf-8"), min_size=1, max_size=24), min_size=2, max_size=5, unique=True))
def test_any_name_the_importer_accepts_gives_a_header_that_compiles(tmp_path_factory, names):
    *inputs, output = names
    graph = helper.make_graph([helper.make_node("Sum", inputs, [output])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in inputs],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, [2])])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    lib = tessera.build(mod, "c", params, executor="aot", mod_name="m")
    folder = lib.export_library(tmp_path_factory.mktemp("mlf"))
    for source in folder.glob("codegen/host/src/tsgen_m_*.c"):
        _gcc("-std=gnu11", "-Wall", "-Werror", "-fsyntax-only", *include_flags(folder), str(source))
    assert [t["name"] for t in lib.metadata()["inputs"]] == inputs


def test_aot_model_runs_on_the_host_and_no_name_runs_as_code(case):
    model, feed = _model(case), _feed(case)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, "c", params, executor="aot", mod_name=case.mod_name)
    outputs = lib.run_host([feed[n] for n in case.inputs])  # a constructor would print PWNED and exit 66
    for got, want in zip(outputs, ort_run(model, feed), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_constructor_in_an_input_name_stays_a_comment():
    """The issue's own reproduction: one input, the payload as its name."""
    case = Case((EVIL,), ("y", "z"), "w")
    model, feed = _model(case), _feed(case)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, "c", params, executor="aot", mod_name="m")
    outputs = lib.run_host([feed[EVIL]])
    for got, want in zip(outputs, ort_run(model, feed), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tessera_run_of_a_hostile_export_runs_only_the_model(tmp_path, capsys):
    """`tessera compile --executor aot` then `tessera run model.tar`, as in the report."""
    from tessera.cli import main

    onnx_path = tmp_path / "e v'il*.onnx"  # the default model name comes from the file name
    onnx.save(_model(CASES["injection"]), onnx_path)
    tar = tmp_path / "evil.tar"
    assert main(["compile", str(onnx_path), "--executor", "aot", "-o", str(tar), "-q"]) == 0
    assert main(["run", str(tar), "--random-input", "--check", "-q"]) == 0
    assert "PWNED" not in capsys.readouterr().out


def test_injection_model_on_a_cortex_m_board():
    case = CASES["injection"]
    model, feed = _model(case), _feed(case)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, "c -mcpu=cortex-m4", params, executor="aot", mod_name=case.mod_name)
    outputs, run = lib.run_board("mps2-an386", [feed[n] for n in case.inputs])
    assert "PWNED" not in run.qemu.stdout
    for got, want in zip(outputs, ort_run(model, feed), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_generated_c_is_the_same_for_the_same_names():
    mod, params = from_onnx(_model(CASES["collisions"]))
    first, second = (tessera.build(mod, "c", params, executor="aot", mod_name="names").files() for _ in range(2))
    assert first == second
    header = first["codegen/host/include/tsgen_names.h"].decode()
    # clean names keep their spelling; the others give way to them
    assert "const float* a_b;" in header and "const float* a_b_1;" in header and "const float* A;" in header


# ------------------------------------------------------------------ refusals


def _neg_model(name: str) -> bytes:
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Neg", [name], ["y"])], "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


@pytest.mark.parametrize("name, message", [
    (b"\xff\xfeQQ", "graph input #0 has a name that is not valid UTF-8"),
    (b"", "graph input #0 has an empty name"),
])
def test_names_onnxruntime_refuses_are_refused(name, message):
    blob = _neg_model("QQQQ").replace(b"\x04QQQQ", bytes([len(name)]) + name) if name else _neg_model("")
    with pytest.raises((UnicodeDecodeError, ort.capi.onnxruntime_pybind11_state.InvalidGraph)):
        session = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
        session.run(None, {name.decode("utf-8", "surrogateescape"): np.ones(2, np.float32)})
    with pytest.raises(ConversionError, match=message):
        from_onnx(onnx.load_from_string(blob))


def test_a_hostile_model_name_is_refused():
    mod, params = from_onnx(_model(CASES["keywords"]))
    with pytest.raises(TesseraError, match="mod_name .* must be a C identifier"):
        tessera.build(mod, "c", params, executor="aot", mod_name="m*/ int x; /*")


def test_a_hostile_model_name_in_an_export_is_refused(tmp_path):
    mod, params = from_onnx(_model(CASES["keywords"]))
    folder, meta = _extract(tessera.build(mod, "c", params, executor="aot", mod_name="ok"), tmp_path)
    meta["model_name"] = "ok_inputs inputs; int main(void){return 3;} struct x"
    (folder / "metadata.json").write_text(json.dumps(meta))
    # edited on purpose, so its checksum line is updated too: the name check itself must refuse it
    sums = folder / "SHA256SUMS"
    digest = hashlib.sha256((folder / "metadata.json").read_bytes()).hexdigest()
    sums.write_text("".join(f"{digest}  metadata.json\n" if line.endswith("  metadata.json") else f"{line}\n"
                            for line in sums.read_text().splitlines()))
    with pytest.raises(TesseraError, match="model_name .* is not a C identifier"):
        MlfModel(folder)
