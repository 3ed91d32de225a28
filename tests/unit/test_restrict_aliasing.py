"""`restrict` on kernel parameters: off exactly where the memory plan lets a written argument overlap another.

A wrong `restrict` is undefined behaviour, so every test here checks the
generated C's signatures against the plan's byte ranges, call by call, and
runs the model against a reference.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera.testing.isa import require_level
from tessera import relay
from tessera.backend.program import POOLED, Role, Step, Tensor
from tessera.backend.program_memory import MemoryOptions, overlapping_params
from tessera.op import elemwise as ew
from tessera.op import transform as tf
from tessera.op.nn import conv
from tessera.relay.module import IRModule
from tessera.relay.ty import TensorType
from tessera.transform.pass_infra import PassContext


def _restrict_flags(c_text: str, kernel: str) -> list[bool]:
    """Per pointer parameter of `kernel`'s exported definition: is it declared `restrict`?"""
    match = re.search(rf"int32_t {kernel}\(([^)]*)\)\s*\{{", c_text)
    assert match is not None, f"no definition of {kernel}"
    return ["restrict" in p for p in match.group(1).split(",") if "*" in p]


def _memory(t: Tensor) -> tuple[tuple[str, object], int, int]:
    owner = t.buffer_owner
    if owner.role in POOLED:
        return ("pool", t.pool), t.offset, t.offset + t.nbytes
    return ("tensor", id(owner)), 0, owner.nbytes


def check_restrict_promises(lib) -> tuple[int, int]:
    """Assert no `restrict` parameter overlaps another argument of a call where either is written;
    returns (overlapping written pairs seen, `restrict` parameters kept)."""
    program = lib.graph_plan.program
    c_text = "\n".join(lib.c_sources.values())
    pairs = kept = 0
    for s in program.steps:
        func = program.kernels.get(s.kernel)
        if func is None:
            continue
        flags = _restrict_flags(c_text, s.kernel)
        assert len(flags) == len(s.args)
        kept += sum(flags)
        for a, ta in enumerate(s.args):
            for b in range(a + 1, len(s.args)):
                tb = s.args[b]
                (ka, lo, hi), (kb, lo2, hi2) = _memory(ta), _memory(tb)
                if ta is tb or ka != kb or not (lo < hi2 and lo2 < hi) or b < func.num_inputs:
                    continue
                pairs += 1
                assert not flags[a] and not flags[b], (s.kernel, ta.name, tb.name)
    return pairs, kept


def _residual_block(seed: int = 0):
    """x -> conv+relu = h -> conv+relu -> conv, + h, relu: the last kernel's epilogue adds h, which dies there."""
    rng = np.random.default_rng(seed)
    x = relay.Var("x", relay.TensorType((1, 8, 10, 10), "float32"))

    def conv3x3(data):
        w = relay.const((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32))
        return conv.conv2d(data, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))

    h = ew.relu(conv3x3(x))
    y = conv3x3(ew.relu(conv3x3(h)))
    return IRModule.from_expr(relay.Function((x,), ew.relu(ew.add(y, h)))), \
        rng.standard_normal((1, 8, 10, 10)).astype(np.float32)


def test_the_residual_epilogue_writing_over_its_skip_input_drops_restrict_on_that_pair_only():
    mod, x = _residual_block()
    planned = tessera.build(mod)
    with PassContext(config={"memory": MemoryOptions(reuse=False)}):
        reference = tessera.build(mod)
    program = planned.graph_plan.program
    residual = next(s for s in program.steps if "add" in s.kernel)
    skip = next(a for a, t in enumerate(residual.args)
                if t.role is Role.INTERMEDIATE and residual.outputs[0].shares is t)
    out = residual.num_inputs
    flags = _restrict_flags("\n".join(planned.c_sources.values()), residual.kernel)
    assert not flags[skip] and not flags[out]  # the output overwrites the skip input element by element
    marked = overlapping_params(program.steps, program.kernels)[residual.kernel]
    assert {skip, out} <= marked
    # every other parameter keeps its promise unless the plan overlaps it with a written one
    assert all(flags[k] for k in range(len(flags)) if k not in marked) and any(flags)
    pairs, kept = check_restrict_promises(planned)
    assert pairs >= 1 and kept >= 1
    # without sharing nothing overlaps: every parameter is restrict
    assert all(all(_restrict_flags("\n".join(reference.c_sources.values()), s.kernel))
               for s in reference.graph_plan.program.steps if s.kernel in reference.graph_plan.program.kernels)
    np.testing.assert_array_equal(planned(x)[0], reference(x)[0])


def test_an_elementwise_kernel_in_place_keeps_restrict_on_its_other_input():
    x = relay.Var("x", relay.TensorType((1, 4, 6, 6), "float32"))
    a = tf.transpose(x, axes=(0, 1, 3, 2))
    b = tf.transpose(ew.negative(x), axes=(0, 1, 3, 2))
    # a and b are read again before the add, where both die: its output may live in one of them
    outputs = (tf.transpose(a, axes=(0, 2, 1, 3)), tf.transpose(b, axes=(0, 2, 1, 3)), ew.add(a, b))
    lib = tessera.build(IRModule.from_expr(relay.Function((x,), relay.Tuple(outputs))))
    program = lib.graph_plan.program
    add = next(s for s in program.steps if "add" in s.kernel)
    flags = _restrict_flags("\n".join(lib.c_sources.values()), add.kernel)
    host = add.outputs[0].shares
    assert host in add.inputs  # in place
    other = next(k for k, t in enumerate(add.inputs) if t is not host)
    assert flags == [k == other for k in range(len(flags))]
    check_restrict_promises(lib)
    xv = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(lib(xv)[2], np.zeros_like(xv))


def _tensor(name: str, offset: int) -> Tensor:
    return Tensor(name, TensorType((4,), "float32"), Role.INTERMEDIATE, offset=offset, pool="pool")


def test_overlapping_inputs_keep_restrict_but_an_output_over_an_input_does_not():
    mod, _ = _residual_block()
    lib = tessera.build(mod)
    kernel = next(s.kernel for s in lib.graph_plan.program.steps if "add" in s.kernel)
    func = lib.graph_plan.program.kernels[kernel]
    n = len(func.params)
    assert func.num_inputs >= 2
    # the first two inputs on the same bytes, everything else apart: reading twice breaks no promise
    args = [_tensor(f"t{k}", 0 if k < 2 else 64 * k) for k in range(n)]
    assert overlapping_params([Step(kernel, args, func.num_inputs)], {kernel: func}) == {}
    # the output on an input's bytes: both lose restrict, nothing else does
    args = [_tensor(f"t{k}", 64 * k) for k in range(n)]
    args[func.num_inputs].offset = args[1].offset
    assert overlapping_params([Step(kernel, args, func.num_inputs)], {kernel: func}) == \
        {kernel: frozenset({1, func.num_inputs})}
    # one byte of overlap counts, touching ranges do not
    args[func.num_inputs].offset = args[1].offset + args[1].nbytes
    assert overlapping_params([Step(kernel, args, func.num_inputs)], {kernel: func}) == {}
    args[func.num_inputs].offset -= 1
    assert overlapping_params([Step(kernel, args, func.num_inputs)], {kernel: func}) == \
        {kernel: frozenset({1, func.num_inputs})}


def _benchmark_model(name: str):
    from tessera.testing import mlperf_tiny, tail_blocks
    from tessera.testing.models import data_input, seeded_input

    if name in mlperf_tiny.MODELS:
        model = mlperf_tiny.build(name)
        return model, data_input(model)[0], mlperf_tiny.sample_input(name)
    model = tail_blocks.BLOCKS[name]()
    input_name, shape = data_input(model)
    return model, input_name, seeded_input(shape, seed=1)


# the planes copy of a convolution shares bytes with a later stage of its kernel in all three, built for
# AVX-512 (on AVX2 their depthwise convolutions run the planes-free kernel of op/nn/conv_depthwise.py)
@pytest.mark.parametrize("name", ["mobilenet_v2_block", "efficientnet_block", "vww_mobilenet"])
def test_models_keep_every_restrict_promise_and_match_onnxruntime(name):
    from tessera.frontend import from_onnx
    from tessera.testing.models import ort_session

    model, input_name, x = _benchmark_model(name)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, params=params, target="c -mcpu=x86-64-v4")
    pairs, kept = check_restrict_promises(lib)
    assert pairs >= 1 and kept >= 1
    require_level("x86-64-v4")
    want = ort_session(model).run(None, {input_name: x})[0]
    np.testing.assert_allclose(lib(x)[0], want, rtol=1e-4, atol=1e-4)
