"""Concatenations whose parts are computed in their result (backend/concat_views.py): where the plan
places them, where it must not, and that both executors compute what the copies computed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera
from tessera import relay
from tessera.backend.build_module import lower_to_tir
from tessera.backend.concat_views import concat_views
from tessera.backend.memory_report import BufferKind, memory_report
from tessera.backend.program import extract_program
from tessera.backend.program_memory import MemoryOptions, overlapping_params, plan_program_memory
from tessera.errors import ArtifactError
from tessera.op import elemwise as ew
from tessera.op import transform as tf
from tessera.op.nn import conv
from tessera.relay.module import IRModule
from tessera.runtime.graph_json import parse_graph_json
from tessera.target.target import Target
from tessera.transform.pass_infra import PassContext

from .test_memory_planning import _check_no_overlap

RNG = np.random.default_rng(0)


def _conv(x, cin: int, cout: int, k: int = 1):
    w = relay.const((RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32))
    return ew.relu(conv.conv2d(x, w, strides=(1, 1), padding=(k // 2,) * 4, dilation=(1, 1)))


def _fire(size: int = 7) -> tuple[IRModule, np.ndarray]:
    """SqueezeNet's fire module: squeeze 1x1, expand 1x1 and 3x3, concatenated, then a wider 3x3 (its
    buffers, not the concatenation's, set the pool; the second part starts 784 bytes in: on a 16-byte
    boundary, not on a 64-byte one)."""
    x = relay.Var("x", relay.TensorType((1, 5, size, size), "float32"))
    s = _conv(x, 5, 3)
    cat = tf.concatenate(_conv(s, 3, 4), _conv(s, 3, 5, k=3), axis=1)
    return (IRModule.from_expr(relay.Function((x,), _conv(cat, 9, 24, k=3))),
            RNG.standard_normal((1, 5, size, size)).astype(np.float32))


def _dense_chain() -> tuple[IRModule, np.ndarray]:
    """DenseNet's growth: c1 = cat(a, b); c2 = cat(c1, conv(c1)); then a 3x3 (4x4 maps: a channel is 64 bytes)."""
    x = relay.Var("x", relay.TensorType((1, 3, 4, 4), "float32"))
    a, b = _conv(x, 3, 2), _conv(x, 3, 3, k=3)
    c1 = tf.concatenate(a, b, axis=1)
    c2 = tf.concatenate(c1, _conv(c1, 5, 3, k=3), axis=1)
    return (IRModule.from_expr(relay.Function((x,), _conv(c2, 8, 24, k=3))),
            RNG.standard_normal((1, 3, 4, 4)).astype(np.float32))


def _program(mod: IRModule, options: MemoryOptions | None = None):
    options = options or MemoryOptions()
    lowered = lower_to_tir(mod, Target("c"), None, PassContext(), lambda m: None, "cv").mod
    program = extract_program(lowered, options.order, results_in_pool=True)
    program.pin_results = True
    return program, plan_program_memory(program, options)


def _reference(mod: IRModule, **build):
    with PassContext(config={"memory": MemoryOptions(reuse=False, order="file")}):
        return tessera.build(mod, **build)


def test_a_fire_module_computes_its_parts_in_the_concatenation():
    mod, x = _fire()
    program, memory = _program(mod)
    (view,) = [s for s in program.steps if s.view]
    result = view.outputs[0]
    a, b = view.inputs
    assert memory.views == 1
    assert a.shares is result and b.shares is result and (a.view_offset, b.view_offset) == (0, a.nbytes)
    assert (a.offset, b.offset) == (result.offset, result.offset + a.nbytes)  # absolute, in the one pool
    assert memory.owners[a.name] == memory.owners[b.name] == memory.owners[result.name] == result.name
    planned = tessera.build(mod)
    assert planned.graph_plan.memory.views == 1
    assert "fused_concatenate" not in "\n".join(planned.c_sources.values())  # no C for the copy nothing calls
    np.testing.assert_array_equal(planned(x)[0], _reference(mod)(x)[0])
    report = memory_report(planned)
    (drawn,) = [b for lane in report.lanes for b in lane.buffers if b.kind is BufferKind.CONCATENATION]
    assert [t.name for t in drawn.tensors] == [a.name, b.name, result.name]
    assert "concatenations computed in place: 1" in report.text()


def test_a_chain_of_concatenations_nests_its_parts():
    mod, x = _dense_chain()
    program, memory = _program(mod)
    views = [s for s in program.steps if s.view]
    assert memory.views == 2 and len(views) == 2
    (a, b), (c1, grown) = views[0].inputs, views[1].inputs
    c2 = views[1].outputs[0]
    assert c1 is views[0].outputs[0] and c1.shares is c2 and a.buffer_owner is c2 and b.buffer_owner is c2
    assert [t.offset - c2.offset for t in (a, b, c1, grown)] == [0, a.nbytes, 0, c1.nbytes]
    # the kernel computing `grown` reads c1 and writes beside it, in the same buffer: no overlap, so its
    # parameters keep `restrict`
    maker = next(s for s in program.steps if grown in s.outputs)
    assert maker.kernel not in overlapping_params(program.steps, program.kernels)
    planned = tessera.build(mod)
    np.testing.assert_array_equal(planned(x)[0], _reference(mod)(x)[0])


@pytest.mark.parametrize("make", [_fire, _dense_chain])
def test_the_aot_executor_skips_the_copies_and_computes_the_same(make):
    mod, x = make()
    planned = tessera.build(mod, executor="aot", mod_name="cv")
    views = [s for s in planned.program.steps if s.view]
    assert views
    source = "\n".join(text.decode() for name, text in planned.files().items() if name.endswith(".c"))
    assert not any(f"{s.kernel}(" in source for s in views)  # no call of a copy, nor C for it
    meta = planned.metadata()
    assert meta["concat_views"] == len(views) and meta["calls"] == meta["steps"] - len(views)
    assert not {k["name"] for k in meta["kernels"]} & {s.kernel for s in views}
    np.testing.assert_array_equal(planned.run_host([x])[0], _reference(mod, executor="aot", mod_name="cv").run_host([x])[0])


def _found(body_of, shape=(1, 2, 4, 4)) -> int:
    """How many concatenations the detection finds (before the plan weighs their memory)."""
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    return len(concat_views(_program(IRModule.from_expr(relay.Function((x,), body_of(x))))[0]))


def _with_part_returned(a, b):
    return relay.Tuple((_conv(tf.concatenate(a, b, axis=1), 5, 2), a))


def test_the_detection_finds_a_plain_concatenation_of_kernel_results():
    assert _found(lambda x: _conv(tf.concatenate(_conv(x, 2, 2), _conv(x, 2, 3), axis=1), 5, 2)) == 1


@pytest.mark.parametrize("case, body_of, shape", [
    ("a part ends off the plan's 16-byte alignment", lambda x: _conv(tf.concatenate(_conv(x, 2, 1), _conv(x, 2, 2),
                                                                                 axis=1), 3, 2), (1, 2, 3, 3)),
    ("a model input is a part", lambda x: _conv(tf.concatenate(x, _conv(x, 2, 2), axis=1), 4, 2), (1, 2, 4, 4)),
    ("a part twice", lambda x: _conv(tf.concatenate(*(2 * [_conv(x, 2, 2)]), axis=1), 4, 2), (1, 2, 4, 4)),
    ("two images: the parts interleave", lambda x: _conv(tf.concatenate(_conv(x, 2, 2), _conv(x, 2, 3), axis=1), 5, 2),
     (2, 2, 4, 4)),
    ("along rows: the parts interleave", lambda x: _conv(tf.concatenate(_conv(x, 2, 2), _conv(x, 2, 2), axis=2), 2, 2),
     (1, 2, 4, 4)),
    ("the concatenation is a model output", lambda x: tf.concatenate(_conv(x, 2, 2), _conv(x, 2, 3), axis=1),
     (1, 2, 4, 4)),
    ("a part is a model output too", lambda x: _with_part_returned(_conv(x, 2, 2), _conv(x, 2, 3, k=3)), (1, 2, 4, 4)),
    ("fused with its tail", lambda x: _conv(ew.sigmoid(tf.concatenate(_conv(x, 2, 2), _conv(x, 2, 3), axis=1)), 5, 2),
     (1, 2, 4, 4)),
])
def test_concatenations_that_keep_their_copy(case, body_of, shape):
    assert _found(body_of, shape) == 0, case


def test_a_part_read_by_two_concatenations_is_placed_in_one():
    def body_of(x):
        a, b, c = _conv(x, 2, 2), _conv(x, 2, 3, k=3), _conv(x, 2, 1)
        return ew.add(_conv(tf.concatenate(a, b, axis=1), 5, 2), _conv(tf.concatenate(a, c, axis=1), 3, 2))
    mod = IRModule.from_expr(relay.Function((x := relay.Var("x", relay.TensorType((1, 2, 4, 4), "float32")),),
                                            body_of(x)))
    program, memory = _program(mod)
    assert memory.views == 1
    xv = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(tessera.build(mod)(xv)[0], _reference(mod)(xv)[0])


def test_views_never_raise_the_lowest_pool():
    """An early part would bring its concatenation's whole buffer to life beside a big branch computed
    later: in the graph's own order the view is dropped, and the bound is the copy's."""
    x = relay.Var("x", relay.TensorType((1, 2, 8, 8), "float32"))
    early = _conv(x, 2, 1)
    wide = _conv(_conv(x, 2, 64, k=3), 64, 64)
    late = _conv(wide, 64, 1)
    mod = IRModule.from_expr(relay.Function((x,), _conv(tf.concatenate(early, late, axis=1), 2, 2)))
    program, with_views = _program(mod, MemoryOptions(order="file"))
    _, without = _program(mod, MemoryOptions(order="file", concat_views=False))
    assert len(concat_views(program)) == 1 and with_views.views == 0
    assert with_views.lower_bound == without.lower_bound
    _, memory_order = _program(mod)
    assert memory_order.lower_bound <= without.lower_bound


def test_a_loaded_graph_with_views_is_checked(tmp_path):
    mod, x = _fire()
    lib = tessera.build(mod)
    lib.export_library(str(tmp_path / "fire.so"))
    loaded = tessera.load_module(str(tmp_path / "fire.so"))
    np.testing.assert_array_equal(tessera.GraphModule(loaded)(x)[0], lib(x)[0])
    graph = json.loads(lib.graph_json)
    (vid,) = [k for k, n in enumerate(graph["nodes"]) if n["op"] == "view"]
    first = graph["nodes"][vid]["inputs"][0][0]
    row = graph["node_row_ptr"]

    def damaged(change) -> bytes:
        g = json.loads(lib.graph_json)
        change(g)
        return json.dumps(g).encode()

    def shift(g):
        g["entries"][row[first]]["offset"] += 4

    def swap(g):
        g["nodes"][vid]["inputs"].reverse()

    def calls(g):
        g["nodes"][vid]["func"] = g["nodes"][first]["func"]

    for change, message in ((shift, "placed at byte"), (swap, "placed at byte"), (calls, "a view calls nothing")):
        with pytest.raises(ArtifactError, match=message):
            parse_graph_json(damaged(change), "fire.so")
    assert all(n["op"] != "view" or "func" not in n for n in graph["nodes"])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.sampled_from([4, 6, 8]), st.booleans())
def test_random_growth_chains_compute_what_the_copies_compute(growth, size, branch_first):
    """DenseNet-like chains of random widths (and, with `branch_first`, a second concatenation of the first
    two values), planned with views against the plain plan: no live bytes overlap, the same outputs."""
    x = relay.Var("x", relay.TensorType((1, 2, size, size), "float32"))
    value, width = _conv(x, 2, 3, k=3), 3
    first = value
    for g in growth:
        value = tf.concatenate(value, _conv(value, width, g, k=3), axis=1)
        width += g
    body = _conv(value, width, 2)
    if branch_first:
        body = relay.Tuple((body, _conv(tf.concatenate(first, _conv(x, 2, 4), axis=1), 7, 3)))
    mod = IRModule.from_expr(relay.Function((x,), body))
    program, memory = _program(mod)
    _check_no_overlap(program, memory)
    xv = RNG.standard_normal((1, 2, size, size)).astype(np.float32)
    for got, want in zip(tessera.build(mod)(xv), _reference(mod)(xv)):
        np.testing.assert_array_equal(got, want)
