"""A TIRToRuntime hook may return any runtime module: C source, or an ExternalModule that runs the PrimFuncs."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay, te
from tessera.backend.lower_partition import LowerPartitions, Lowering
from tessera.errors import TesseraError
from tessera.op.nn import matmul
from tessera.relay.dataflow_pattern import is_op, wildcard
from tessera.relay.pattern_table import PatternEntry
from tessera.runtime.external import ExternalModule
from tessera.target import KINDS, RELAY_TO_TIR, TAGS, TIR_TO_RUNTIME, TargetError, TargetKind, register_tag
from tessera.tir.stmt import PrimFunc

MM = is_op("nn.matmul")(wildcard(), wildcard())
ENTRY = PatternEntry("npaccel.matmul", MM)


class NumpyKernels(ExternalModule):
    """Runs each PrimFunc it is given as a NumPy matrix product (the C body is never compiled)."""

    type_key = "npaccel_kernels"

    def __init__(self, names):
        self.names = list(names)

    def function_names(self):
        return self.names

    def get_function(self, name):
        def run(inputs, outputs):
            outputs[0][...] = inputs[0] @ inputs[1]
        return run

    def save(self):
        return ",".join(self.names).encode()

    @classmethod
    def load(cls, data):
        return cls(data.decode().split(","))


def _extern_matmul(m, args):
    a, b = args
    return te.extern((a.shape[0], b.shape[1]), [a, b], lambda ins, out: te.call_extern(
        "npaccel_matmul", te.pointer(ins[0]), te.pointer(ins[1]), te.pointer(out)), "matmul")


@pytest.fixture
def kind():
    """A kind whose TIRToRuntime returns `make(mod)`, set by the test."""
    hook = {"make": lambda mod: NumpyKernels(gv.name_hint for gv, f in mod.items() if isinstance(f, PrimFunc))}
    (TargetKind.register("npaccel", accelerator=True).set_pattern_table([ENTRY])
     .set_attr(RELAY_TO_TIR, LowerPartitions("npaccel", [Lowering(ENTRY, MM, _extern_matmul)]))
     .set_attr(TIR_TO_RUNTIME, lambda mod, target: hook["make"](mod)))
    register_tag("npaccel", "c -accelerators=npaccel")
    yield hook
    KINDS.remove("npaccel")
    TAGS.remove("npaccel")


def _model():
    a = relay.Var("a", relay.TensorType((2, 3), "float32"))
    b = relay.Var("b", relay.TensorType((3, 4), "float32"))
    return relay.IRModule.from_expr(relay.Function((a, b), matmul.matmul(a, b)))


def test_the_graph_executor_calls_an_external_module_from_tir_to_runtime(kind):
    lib = tessera.build(_model(), target="npaccel")
    (module,) = lib.external_modules
    assert isinstance(module, NumpyKernels) and module.names == ["tsgen_default_npaccel_0"]
    assert not any("npaccel_matmul" in text for text in lib.c_sources.values())  # no C for its kernel
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(lib(x, y)[0], x @ y)


def test_the_aot_executor_refuses_it_naming_the_kind(kind):
    with pytest.raises(TesseraError, match=r"target kind 'npaccel': its TIRToRuntime hook returned NumpyKernels, "
                                           r"not C source; the AOT executor calls every kernel from C "
                                           r"\(tsgen_default_npaccel_0\)\. Use the graph executor"):
        tessera.build(_model(), target="npaccel", executor="aot")


def test_a_module_missing_a_primfunc_is_refused(kind):
    kind["make"] = lambda mod: NumpyKernels(["something_else"])
    with pytest.raises(TargetError, match=r"hook TIRToRuntime returned a module without functions "
                                          r"\['tsgen_default_npaccel_0'\]"):
        tessera.build(_model(), target="npaccel")


def test_anything_else_is_refused_with_what_was_expected(kind):
    kind["make"] = lambda mod: "C text"
    with pytest.raises(TargetError, match=r"hook TIRToRuntime returned str, expected a runtime module "
                                          r"\(CSourceModule or ExternalModule\)"):
        tessera.build(_model(), target="npaccel")


def test_an_exported_library_keeps_the_module(kind, tmp_path):
    from tessera.runtime import external

    external.register_external_module(NumpyKernels)
    try:
        path = tessera.build(_model(), target="npaccel").export_library(tmp_path / "m.so")
        loaded = tessera.load_module(path)
        x, y = np.full((2, 3), 2, np.float32), np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(loaded(x, y)[0], x @ y)
    finally:
        external._LOADERS.pop(NumpyKernels.type_key, None)
