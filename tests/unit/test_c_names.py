"""codegen/names.py: C identifiers, comment text and string literals made from untrusted names."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import tessera
from tessera.backend.aot.runner import include_flags
from tessera.backend.memory_plan import PoolSpec
from tessera.backend.program_memory import MemoryOptions
from tessera.codegen.c_reserved import RESERVED_WORDS
from tessera.codegen.c_source import CodeGenC
from tessera.codegen.names import (MAX_IDENTIFIER, Namespace, assembler_string, comment_text, is_c_identifier,
                                   is_reserved, string_literal)
from tessera.crt import INCLUDE_DIR
from tessera.errors import CompileError
from tessera.frontend import from_onnx
from tessera.runtime.export import _metadata_source
from tessera.target.errors import TargetError
from tessera.target.named import CompilationConfig, parse_named_targets
from tessera.target.target import Target
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.transform.pass_infra import PassContext

NASTY = ["*/", "/*", "a*/b/*c", "??/", "??=", "??'", "back\\", "\\", "line\nbreak", "nul\0", "cr\r", '"', "'",
         "#define X 1", "é", "输入", "\x7f", "\udcff", "", " ", "x" * 500]
names = st.text(st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    [*NASTY, "int", "a b", "a_b", "A", "a", "_", "__x", "_X", "ts", "ts_a", "TSGEN_A", "tessera", "v_", "x_1", "EOF"])


def _safe(name: str) -> bool:
    return is_c_identifier(name) and not is_reserved(name)


@settings(max_examples=300, deadline=None)
@given(st.lists(names, max_size=12), st.booleans())
def test_namespace_hands_out_distinct_safe_identifiers(hints, fold_case):
    first = Namespace(fold_case=fold_case).assign(hints)
    assert first == Namespace(fold_case=fold_case).assign(hints)  # deterministic
    assert all(_safe(n) and len(n) <= MAX_IDENTIFIER + 8 for n in first)
    keys = [n.upper() if fold_case else n for n in first]
    assert len(set(keys)) == len(keys)
    # a hint that is already a safe identifier, and the first of its spelling, is kept as it is
    for k, hint in enumerate(hints):
        key = hint.upper() if fold_case else hint
        earlier = {(h.upper() if fold_case else h) for h in hints[:k]}
        if _safe(hint) and len(hint) <= MAX_IDENTIFIER and key not in earlier:
            assert first[k] == hint


@pytest.mark.parametrize("hint, expected", [
    ("int", "int_1"), ("main", "main_1"), ("class", "class_1"), ("linux", "linux_1"), ("EOF", "EOF_1"),
    ("__x", "v__x"), ("_X", "v_X"), ("ts_x", "vts_x"), ("1x", "v1x"), ("", "v"), (" ", "v_"), ("a b", "a_b"),
    ("é", "_u00e9"), ("o-1", "o_1"),
])
def test_mangled_names_read_like_the_original(hint, expected):
    assert Namespace().fresh(hint) == expected


def test_long_names_that_share_a_prefix_stay_apart():
    a, b = Namespace().assign(["x" * 300, "x" * 300 + "y"])
    assert a != b and len(a) == len(b) == MAX_IDENTIFIER and a.startswith("x" * 30)


@settings(max_examples=300, deadline=None)
@given(names)
def test_comment_text_cannot_leave_its_comment(text):
    out = comment_text(text)
    assert all(" " <= c <= "~" for c in out)
    assert "*/" not in out and "/*" not in out and "??" not in out and not out.endswith("\\")


def _hex_program(strings: list[str]) -> str:
    lines = ["#include <stdio.h>"]
    for k, text in enumerate(strings):
        lines.append(f"/* {comment_text(text)} */")
        lines.append(f"static const char s{k}[] = {string_literal(text)};")
    lines.append("int main(void) {")
    for k in range(len(strings)):
        lines.append(f'  for (unsigned i = 0; i + 1 < sizeof s{k}; ++i) printf("%02x", (unsigned char)s{k}[i]);')
        lines.append('  printf("\\n");')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_comments_and_string_literals_compile_to_the_exact_bytes(tmp_path):
    """Under strict C11 trigraphs are live: `??/` in a literal or comment would change the program."""
    strings = [s for s in NASTY if "\udcff" not in s]
    (tmp_path / "s.c").write_text(_hex_program(strings))
    build = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wtrigraphs", "-Wcomment",
                            str(tmp_path / "s.c"), "-o", str(tmp_path / "s")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(tmp_path / "s")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [s.encode().hex() for s in strings]


def test_embedded_blobs_are_found_in_any_folder(tmp_path):
    """The graph executor's export embeds its blobs under fixed names found through the assembler's
    include path, so no folder name reaches the generated C; any folder must work."""
    folder = tmp_path / 'we"ird \\ dir\né'
    folder.mkdir()
    blobs = {"graph_json": b"{}*/", "params": bytes(range(256)), "external": b'"\\'}
    for name, data in blobs.items():
        (folder / f"{name}.bin").write_bytes(data)
    assert assembler_string('a"b\\c\n') == '"a\\"b\\\\c\\012"'
    source = _metadata_source("0" * 64)
    assert str(tmp_path) not in source and 'we"ird' not in source
    (tmp_path / "meta.c").write_text(source)
    main = ["#include <stdint.h>", "#include <stdio.h>"]
    for name in blobs:
        main += [f"const uint8_t* tessera_{name}_data(void);", f"uint64_t tessera_{name}_size(void);"]
    main.append("int main(void) {")
    for name in blobs:
        main.append(f"  for (uint64_t i = 0; i < tessera_{name}_size(); ++i)")
        main.append(f'    printf("%02x", tessera_{name}_data()[i]);')
        main.append('  printf("\\n");')
    main += ["  return 0;", "}"]
    (tmp_path / "main.c").write_text("\n".join(main) + "\n")
    subprocess.run(["gcc", "-Wall", "-Werror", f"-Wa,-I{folder}", str(tmp_path / "meta.c"), str(tmp_path / "main.c"),
                    "-o", str(tmp_path / "blobs")], check=True)
    out = subprocess.run([str(tmp_path / "blobs")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [data.hex() for data in blobs.values()]


def _object_like_macros(cc: str, flags: list[str]) -> set[str]:
    headers = "".join(f"#include <{h}>\n" for h in ("stdint.h", "stddef.h", "math.h", "stdio.h", "string.h"))
    headers += '#include "tessera/c_runtime_api.h"\n#include "tessera/c_backend_api.h"\n'
    run = subprocess.run([cc, *flags, f"-I{INCLUDE_DIR}", "-dM", "-E", "-x", "c", "-"], input=headers,
                         capture_output=True, text=True, check=True)
    return {m.group(1) for m in re.finditer(r"^#define ([A-Za-z_]\w*) ", run.stdout, re.M)}


@pytest.mark.parametrize("cc, flags", [
    ("gcc", ["-std=gnu11"]),
    ("arm-none-eabi-gcc", ["-std=gnu11", "-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard"]),
])
def test_no_identifier_is_a_macro_of_the_headers_generated_code_includes(cc, flags):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    macros = _object_like_macros(cc, flags)
    assert {"EOF", "NULL", "INT8_MAX"} | ({"linux", "unix"} if cc == "gcc" else set()) <= macros  # the probe works
    assert not [m for m in macros if _safe(m)], "macros a tensor name could still take"


def test_keywords_of_c_and_cxx_are_reserved():
    for word in ("int", "_Bool", "bool", "typeof", "asm", "main", "class", "template", "this", "wchar_t", "co_await"):
        assert is_reserved(word)
    assert "_Bool" not in RESERVED_WORDS  # C's `_X` keywords are reserved by rule, not by list


# --------------------------------------------------------------- C functions


def test_locals_never_hide_what_a_function_calls():
    """A parameter named like the library function or extern the body calls gets another name."""
    a, b, out = Buffer("lib_fn", (4,), "float32"), Buffer("expf", (4,), "float32"), Buffer("int", (4,), "float32")
    i = E.Var("i")
    body = S.seq(
        S.For(i, E.IntImm(4), S.BufferStore(
            out, E.call(E.Intrinsic.EXP, [E.BufferLoad(b, (i,), "float32")], "float32"), (i,))),
        S.Evaluate(E.call("lib_fn", [E.BufferPtr(a, E.IntImm(0)), E.BufferPtr(out, E.IntImm(0))], "int32")),
    )
    gen = CodeGenC()
    gen.add_function(S.PrimFunc("kernel", (a, b, out), body, 2))
    source = gen.source()
    signature = next(line for line in source.splitlines() if "kernel(" in line)
    assert re.findall(r"restrict (\w+)", signature) == ["lib_fn_1", "expf_1", "int_1"]
    program = "#include <stdint.h>\nint32_t lib_fn(const float* a, float* b);\n" + source
    build = subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Werror", "-fsyntax-only", "-x", "c", "-"],
                           input=program, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr


def test_executor_parameters_are_the_header_fields():
    """The executor calls no math routine, so `expf` keeps its name there as in the header."""
    names = ["expf", "floor", "a b"]
    graph = helper.make_graph([helper.make_node("Sum", names, ["y"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    lib = tessera.build(mod, "c", params, executor="aot", mod_name="m")
    executor = next(s.text for s in lib.sources() if s.name == "tsgen_m_executor.c")
    signature = next(line for line in executor.splitlines() if "tsgen_m_run_model(" in line)
    assert re.findall(r"restrict (\w+)", signature) == ["expf", "floor", "a_b", "params", "y", "pool"]
    assert [t["c_name"] for t in lib.metadata()["inputs"]] == ["expf", "floor", "a_b"]


def test_a_kernel_name_that_is_not_an_identifier_is_refused():
    out = Buffer("out", (1,), "float32")
    with pytest.raises(CompileError, match="kernel name 'k\\*/x' is not a valid C identifier"):
        CodeGenC().add_function(S.PrimFunc("k*/x", (out,), S.Evaluate(E.IntImm(0)), 0))


# ------------------------------------------------------------- pools, pieces


@pytest.mark.parametrize("name", ["int", "class", "EOF", "é", "__p", "_P", "ts_p", "a b", "x" * 60, ""])
def test_pool_names_must_be_safe_identifiers(name):
    with pytest.raises(CompileError, match="pool name .* must be an ASCII C identifier"):
        PoolSpec(name)


@pytest.mark.parametrize("pools, message", [
    (("sram", "SRAM"), "differ only in case"),
    (("Params",), "reserved"),
    (("WORKSPACE",), "reserved"),
])
def test_pool_names_whose_macros_would_clash_are_refused(pools, message):
    with pytest.raises(CompileError, match=message):
        MemoryOptions(pools=tuple(PoolSpec(p) for p in pools))


def test_pool_names_do_not_clash_with_inputs_or_entry_points(tmp_path):
    """Pool `input_x` has the macro TSGEN_M_INPUT_X_SIZE and pool `run` a static array: neither may clash."""
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["run"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("run", TensorProto.FLOAT, [4])])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    memory = MemoryOptions(pools=(PoolSpec("input_x", 16), PoolSpec("run")))
    with PassContext(config={"memory": memory}):
        lib = tessera.build(mod, "c", params, executor="aot", mod_name="m")
    folder = lib.export_library(tmp_path / "mlf")
    for source in (folder / "codegen/host/src").glob("*.c"):
        subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Werror", "-c", *include_flags(folder), str(source),
                        "-o", str(tmp_path / f"{source.stem}.o")], check=True)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(lib.run_host([x])[0], x)


@pytest.mark.parametrize("pieces", [{"../evil": "c"}, {"a\n": "c"}, {"a/b": "c"}])
def test_piece_names_are_plain_identifiers(pieces):
    with pytest.raises(TargetError, match="is not a valid piece name"):
        parse_named_targets(pieces)
    with pytest.raises(TargetError, match="is not a valid piece name"):
        CompilationConfig({k: Target(v) for k, v in pieces.items()}, next(iter(pieces)))


def test_onnx_names_survive_an_exported_graph_library(tmp_path):
    names = ["a b", "a_b", "*/ x\n", "é"]
    graph = helper.make_graph([helper.make_node("Sum", names, ["o+1"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in names],
                              [helper.make_tensor_value_info("o+1", TensorProto.FLOAT, [2])])
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    path = tessera.build(mod, "c", params).export_library(tmp_path / "m.so")
    gm = tessera.GraphModule(tessera.runtime.load_module(path))
    assert gm.input_names == names
    for k, n in enumerate(names):
        gm.set_input(n, np.full(2, k, np.float32))
    gm.run()
    np.testing.assert_array_equal(gm.get_output(0), np.full(2, 6, np.float32))
