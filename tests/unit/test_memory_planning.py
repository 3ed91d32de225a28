"""Static memory planning over the lowered program: liveness, order, in place, pools, exactness."""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera
from tessera import relay
from tessera.op import elemwise as ew
from tessera.op import transform as tf
from tessera.op.nn import conv, pool
from tessera.backend.build_module import lower_to_tir
from tessera.backend.inplace import inplace_pairs, kernel_spans
from tessera.backend.memory_plan import (BufferInfo, PoolOverflowError, PoolSpec, lower_bound, plan_memory,
                                         plan_pools)
from tessera.backend.program import POOLED, Role, extract_program
from tessera.backend.program_memory import MemoryOptions, plan_program_memory
from tessera.backend.schedule import Graph, Node, best_order, depth_first, peak
from tessera.cli import main as cli
from tessera.errors import CompileError
from tessera.relay.module import IRModule
from tessera.target.target import Target
from tessera.transform.pass_infra import PassContext

SHAPE = (1, 4, 6, 6)
UNARY = ("relu", "neg", "transpose", "pool")
BINARY = ("add", "mul", "concat_split", "concat_conv")
# a 1x1 convolution back to SHAPE's channels, after a concatenation of two values (its parts may be
# computed in it: backend/concat_views.py)
MERGE = relay.const(np.random.default_rng(5).standard_normal((SHAPE[1], 2 * SHAPE[1], 1, 1)).astype(np.float32))


def _op(kind: str, args: list):
    a = args[0]
    if kind == "relu":
        return ew.relu(a)
    if kind == "neg":
        return ew.negative(a)
    if kind == "transpose":
        return tf.transpose(a, axes=(0, 1, 3, 2))
    if kind == "pool":
        return _pool(a)
    b = args[1]
    if kind == "add":
        return ew.add(a, b)
    if kind == "mul":
        return ew.multiply(a, b)
    if kind == "concat_conv":
        return conv.conv2d(tf.concatenate(a, b, axis=1), MERGE, strides=(1, 1), padding=(0,) * 4, dilation=(1, 1))
    return tf.strided_slice(tf.concatenate(a, b, axis=1), begin=(0, 2, 0, 0), end=(1, 6, 6, 6), strides=(1, 1, 1, 1))


def _pool(a):
    return pool.max_pool2d(a, kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))


@st.composite
def graphs(draw):
    """A random DAG of 4-D float32 ops over one input (shapes kept equal so any op takes any value)."""
    x = relay.Var("x", relay.TensorType(SHAPE, "float32"))
    values = [x]
    for _ in range(draw(st.integers(2, 9))):
        kind = draw(st.sampled_from(UNARY + BINARY))
        picks = draw(st.lists(st.integers(0, len(values) - 1), min_size=2, max_size=2))
        values.append(_op(kind, [values[i] for i in picks]))
    used = {id(a) for v in values[1:] for a in getattr(v, "args", ())}
    sinks = [v for v in values[1:] if id(v) not in used] or [values[-1]]
    body = sinks[0] if len(sinks) == 1 else relay.Tuple(sinks)
    return IRModule.from_expr(relay.Function((x,), body))


def _lowered(mod: IRModule):
    return lower_to_tir(mod, Target("c"), None, PassContext(), lambda m: None, "rand").mod


def _check_no_overlap(program, memory) -> None:
    """Independently of the planner: tensors alive at the same tick never share bytes, unless in place (the
    same bytes) or placed in a concatenation (one range inside the other; two parts lie apart)."""
    width = max([kernel_spans(f)[0] for f in program.kernels.values()] + [1])
    life: dict[int, list[int]] = {}
    spans = {name: kernel_spans(f)[1] for name, f in program.kernels.items()}
    for k, s in enumerate(program.steps):
        for a, t in enumerate(s.args):
            lo, hi = spans[s.kernel][a] if s.kernel in spans else (0, width - 1)
            span = life.setdefault(id(t), [k * width + lo, k * width + hi])
            if a >= s.num_inputs:
                span[0] = min(span[0], k * width + lo)
            span[1] = max(span[1], k * width + hi)
    pooled = [t for t in program.pooled() if t.buffer_owner.role in POOLED]
    for i, a in enumerate(pooled):
        for b in pooled[i + 1:]:
            if a.buffer_owner is b.buffer_owner:
                a0, a1, b0, b1 = a.offset, a.offset + a.nbytes, b.offset, b.offset + b.nbytes
                assert (a0 <= b0 and b1 <= a1) or (b0 <= a0 and a1 <= b1) or a1 <= b0 or b1 <= a0, \
                    f"{a.name} and {b.name} share a buffer and partly overlap"
                continue
            if a.pool != b.pool:
                continue
            alive_together = life[id(a)][0] <= life[id(b)][1] and life[id(b)][0] <= life[id(a)][1]
            overlap = a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes
            assert not (alive_together and overlap), f"{a.name} and {b.name} overlap while both alive"
    for p in memory.pools:
        p.plan.check()
        assert p.size >= p.plan.lower_bound


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from(["memory", "file"]))
def test_no_two_live_buffers_overlap_on_random_graphs(mod, order):
    lowered = _lowered(mod)
    program = extract_program(lowered, order, results_in_pool=True)
    program.pin_results = True
    memory = plan_program_memory(program, MemoryOptions(order=order))
    _check_no_overlap(program, memory)
    assert memory.lower_bound <= memory.file_order_bound or order == "memory"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=40))
def test_planners_place_live_buffers_apart_and_deterministically(spec):
    buffers = [BufferInfo(f"b{k}", size, start, start + length) for k, (size, start, length) in enumerate(spec)]
    plan = plan_memory(buffers)
    plan.check()
    assert plan.pool_size >= lower_bound(buffers, 16)
    again = plan_memory(list(buffers))
    assert (again.offsets, again.pool_size, again.algorithm) == (plan.offsets, plan.pool_size, plan.algorithm)
    limit = max(b.size for b in buffers) * 2
    try:
        pools = plan_pools(buffers, [PoolSpec("fast", limit), PoolSpec("big")], {})
    except PoolOverflowError:
        pytest.fail("the unlimited pool takes whatever the fast one cannot")
    assert pools[0].size <= limit
    assert sorted(n for p in pools for n in p.plan.offsets) == sorted(b.name for b in buffers)
    for p in pools:
        p.plan.check()


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_memory_aware_order_is_topological_and_never_worse(data):
    n = data.draw(st.integers(1, 14))
    nodes = []
    for k in range(n):
        ins = data.draw(st.lists(st.integers(-1, k - 1), max_size=3)) if k else [-1]
        nodes.append(Node(tuple(i for i in ins), (k,), data.draw(st.integers(0, 50))))
    sizes = {k: data.draw(st.integers(1, 100)) for k in range(n)}
    graph = Graph(tuple(nodes), sizes, frozenset({n - 1}))
    order, _ = best_order(graph)
    position = {k: i for i, k in enumerate(order)}
    assert sorted(order) == list(range(n))
    assert all(position[i] < position[k] for k, node in enumerate(nodes) for i in node.inputs if i >= 0)
    assert peak(graph, order) <= peak(graph, depth_first(graph))


def test_branches_are_reordered_to_lower_the_peak():
    # a big tensor feeding a long side branch: running the side branch first frees it early
    big, small = 1000, 10
    nodes = (Node((-1,), (0,)), Node((0,), (1,)), Node((-1,), (2,)), Node((2,), (3,)), Node((1, 3), (4,)))
    graph = Graph(nodes, {0: big, 1: small, 2: big, 3: small, 4: small}, frozenset({4}))
    order, strategy = best_order(graph)
    assert peak(graph, order) <= peak(graph, depth_first(graph))


def _kernel(mod_fn):
    x = relay.Var("x", relay.TensorType(SHAPE, "float32"))
    lowered = _lowered(IRModule.from_expr(relay.Function((x,), mod_fn(x))))
    return next(f for gv, f in lowered.items() if gv.name_hint != "main")


def test_elementwise_kernels_may_write_over_their_input_and_transposes_may_not():
    assert inplace_pairs(_kernel(lambda x: ew.relu(ew.negative(x)))) == {1: 0}
    assert inplace_pairs(_kernel(lambda x: tf.transpose(ew.negative(x), axes=(0, 1, 3, 2)))) == {}
    assert inplace_pairs(_kernel(_pool)) == {}


def _branchy(seed: int = 0):
    """conv -> (relu, pool) branches -> concat; weights seeded."""
    rng = np.random.default_rng(seed)
    x = relay.Var("x", relay.TensorType((1, 3, 12, 12), "float32"))
    w1 = relay.const(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    w2 = relay.const(rng.standard_normal((8, 8, 1, 1)).astype(np.float32))
    c = conv.conv2d(x, w1, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    a = ew.relu(ew.negative(c))
    b = conv.conv2d(_pool(c), w2, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    out = tf.concatenate(ew.sigmoid(a), ew.relu(b), axis=1)
    return IRModule.from_expr(relay.Function((x,), ew.relu(out))), \
        rng.standard_normal((1, 3, 12, 12)).astype(np.float32)


@pytest.mark.parametrize("target", ["c", "blas"])
def test_graph_executor_outputs_are_bit_exact_with_planning_on(target):
    mod, x = _branchy()
    planned = tessera.build(mod, target=target)
    with PassContext(config={"memory": MemoryOptions(reuse=False, order="file")}):
        reference = tessera.build(mod, target=target)
    assert planned.graph_plan.memory.total < reference.graph_plan.memory.total
    np.testing.assert_array_equal(planned(x)[0], reference(x)[0])


def test_an_elementwise_kernel_writes_over_the_input_that_dies_there_and_stays_exact():
    x = relay.Var("x", relay.TensorType(SHAPE, "float32"))
    t = tf.transpose(x, axes=(0, 1, 3, 2))
    mod = IRModule.from_expr(relay.Function((x,), relay.Tuple((tf.transpose(t, axes=(0, 2, 1, 3)), ew.relu(t)))))
    planned = tessera.build(mod)
    with PassContext(config={"memory": MemoryOptions(reuse=False)}):
        reference = tessera.build(mod)
    steps = planned.graph_plan.program.steps
    relu = next(s for s in steps if "relu" in s.kernel)
    assert planned.graph_plan.memory.inplace == 1 and relu.outputs[0].shares is relu.inputs[0]
    source = "\n".join(planned.c_sources.values())
    definition = next(line for line in source.splitlines() if f"int32_t {relu.kernel}(" in line)
    assert "restrict" not in definition  # input and output share memory: no false promise to gcc
    xv = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    for got, want in zip(planned(xv), reference(xv)):
        np.testing.assert_array_equal(got, want)


def test_aot_outputs_are_bit_exact_with_planning_on_and_in_two_pools():
    mod, x = _branchy()
    planned = tessera.build(mod, executor="aot", mod_name="br")
    with PassContext(config={"memory": MemoryOptions(reuse=False, order="file")}):
        reference = tessera.build(mod, executor="aot", mod_name="br")
    limit = planned.program.pool_size // 2
    pools = (PoolSpec("sram", limit, ("c",)), PoolSpec("dram"))
    with PassContext(config={"memory": MemoryOptions(pools=pools)}):
        split = tessera.build(mod, executor="aot", mod_name="br")
    assert [p.name for p in split.program.pools] == ["sram", "dram"]
    assert 0 < split.program.pools[0].size <= limit and split.program.pools[1].size > 0
    expected = reference.run_host([x])[0]
    np.testing.assert_array_equal(planned.run_host([x])[0], expected)
    np.testing.assert_array_equal(split.run_host([x])[0], expected)
    meta = split.metadata()
    assert [(p["name"], p["size_bytes"]) for p in meta["pools"][:2]] == [(p.name, p.size) for p in split.program.pools]
    assert meta["pools"][0]["targets"] == ["c"] and meta["lower_bound_bytes"] > 0
    assert "TSGEN_BR_SRAM_SIZE" in split.header() and "uint8_t* dram;" in split.header()


def test_a_model_that_cannot_fit_names_the_pool_sizes_and_live_tensors():
    mod, _ = _branchy()
    with PassContext(config={"memory": MemoryOptions(pools=(PoolSpec("sram", 1024),))}):
        with pytest.raises(PoolOverflowError, match=r"pool 'sram' overflows: planned \d+ bytes \(lower bound \d+\), "
                                                    r"limit 1024 bytes; alive at the peak \(time \d+\): \w+ \(\d+ B, "
                                                    r"alive \d+-\d+\).* the peak is in step \d+, kernel tsgen_br_fused"):
            tessera.build(mod, executor="aot", mod_name="br")
    with pytest.raises(CompileError, match="reserved"):
        MemoryOptions(pools=(PoolSpec("params"),))


def test_metadata_and_cli_memory_report(tmp_path, capsys):
    from tessera.testing import mlperf_tiny

    model = mlperf_tiny.model_path("kws_ds_cnn")
    tar, svg = tmp_path / "kws.tar", tmp_path / "mem.svg"
    assert cli(["compile", str(model), "--executor", "aot", "-o", str(tar), "--memory-report", str(svg), "-q"]) == 0
    out = capsys.readouterr().out
    assert "lower bound" in out and "lower bound of the file's own order" in out
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<rect") > 10 and "lower bound" in text
    with tarfile.open(tar) as t:
        meta = json.loads(t.extractfile("metadata.json").read())
    pool = meta["pools"][0]
    assert {"name", "size_bytes"} <= set(pool) and pool["size_bytes"] <= 1.05 * meta["lower_bound_bytes"]
    assert meta["lower_bound_bytes"] <= meta["file_order_lower_bound_bytes"]
    assert all(k["workspace_bytes"] == 0 for k in meta["kernels"])  # every scratch is planned
    assert any(k["planned_scratch_bytes"] > 0 for k in meta["kernels"])
    assert Role.WORKSPACE.value == "workspace"
