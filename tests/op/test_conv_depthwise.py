"""Depthwise convolutions as channel-blocked kernel calls (op/nn/conv_depthwise.py, codegen/c_depthwise.py):
against NumPy for widths 1..20, strides, dilations, uneven padding, channel counts off the 8-channel block,
bands of rows on large maps and fused epilogues, on the AVX2 and the AVX-512 level; which convolutions take it,
and the tuner's knob between it and the planar schedule."""

from __future__ import annotations

import platform

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.op import elemwise, elemwise_activation
from tessera.op.nn import conv
from tessera.op.nn.conv import ConvAttrs, conv_reference
from tessera.op.nn.conv_depthwise import (DEPTHWISE_BLOCK, DEPTHWISE_SYMBOL, MAX_SCRATCH_VECTORS, WORKLOAD_OP,
                                          band_rows, fits_depthwise, scratch_vectors)
from tessera.op.nn.conv_schedule import ConvGeometry
from tessera.op.schedule_context import ScheduleContext
from tessera.target import Target
from tessera.target.cpu_id import cpu_key
from tessera.testing.isa import require_level
from tessera.transform import PassContext
from tessera.tune import LOG_CONFIG_KEY, Record, TuningLog, extract_tasks

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 ISA levels need an x86-64 host")
LEVELS = ["x86-64-v3", "x86-64-v4"]  # AVX2 + FMA, AVX-512 (the kernel's vectors are eight floats on both)


def _module(x_shape, kernel, strides, padding, dilation, bias_relu=False):
    channels = x_shape[1]
    x = relay.Var("x", relay.TensorType(x_shape, "float32"))
    w = relay.Var("w", relay.TensorType((channels, 1, *kernel), "float32"))
    y = conv.conv2d(x, w, strides=strides, padding=padding, dilation=dilation, groups=channels)
    params = [x, w]
    if bias_relu:
        b = relay.Var("b", relay.TensorType((channels, 1, 1), "float32"))
        y = elemwise_activation.relu(elemwise.add(y, b))
        params.append(b)
    return relay.IRModule.from_expr(relay.Function(params, y))


def _check(level, x_shape, kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), bias_relu=False,
           called=True):
    rng = np.random.default_rng(sum(x_shape))
    channels = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((channels, 1, *kernel)).astype(np.float32)
    lib = tessera.build(_module(x_shape, kernel, strides, padding, dilation, bias_relu), target=f"c -mcpu={level}")
    source = "".join(lib.c_sources.values())
    assert (f"{DEPTHWISE_SYMBOL}(" in source) == called
    require_level(level)
    want = conv_reference([x, w], ConvAttrs(strides, padding, dilation, channels))
    if bias_relu:
        b = rng.standard_normal((channels, 1, 1)).astype(np.float32)
        got = lib(x, w, b)[0]
        want = np.maximum(want + b, 0)
    else:
        got = lib(x, w)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return source


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("width", range(1, 21))
def test_widths_one_to_twenty(level, width):
    """Rows shorter and longer than the block, with 13 channels (one full block and five). Maps one
    wide, whose taps mostly read padding, are split into regions (conv_regions) first."""
    _check(level, (1, 13, 3 + width % 4, width), called=width > 1)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("x_shape, kernel, strides, padding, dilation", [
    ((1, 8, 12, 12), (3, 3), (2, 2), (0, 0, 1, 1), (1, 1)),  # TF-style stride 2: padding after only
    ((2, 5, 17, 15), (3, 3), (2, 2), (1, 0, 1, 2), (1, 1)),  # two images, uneven padding
    ((1, 3, 9, 7), (3, 3), (2, 1), (2, 0, 0, 3), (1, 1)),  # different strides and pads per dim
    ((1, 17, 11, 6), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((1, 9, 14, 14), (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),  # ConvNeXt's kernel
    ((1, 6, 13, 10), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated
    ((1, 4, 5, 5), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),  # no padding
    ((1, 2, 9, 8), (3, 3), (1, 1), (3, 2, 4, 3), (1, 1)),  # padding wider than the kernel's reach
])
def test_strides_padding_and_dilation(level, x_shape, kernel, strides, padding, dilation):
    _check(level, x_shape, kernel, strides, padding, dilation)


@pytest.mark.parametrize("level", LEVELS)
def test_large_maps_run_in_bands_of_rows(level):
    """A 7x7 on a 150x150 map does not fit the scratch at once: several bands, each re-reading its top rows."""
    g = ConvGeometry((1, 3, 75, 75), (7, 7), (2, 2), (1, 1), 1, 1, in_spatial=(150, 150))
    assert 0 < band_rows(g) < 75 and scratch_vectors(g, band_rows(g)) <= MAX_SCRATCH_VECTORS
    _check(level, (1, 3, 150, 150), kernel=(7, 7), strides=(2, 2), padding=(3, 2, 3, 4))


@pytest.mark.parametrize("level", LEVELS)
def test_bias_and_relu_run_as_the_calls_tail(level):
    source = _check(level, (1, 20, 25, 5), bias_relu=True)
    assert "planes_buf" not in source  # no planar copy left


def _geometry(shape, kernel=(3, 3), strides=(1, 1), per_group=(1, 1)):
    return ConvGeometry(shape, kernel, strides, (1, 1), *per_group)


@pytest.mark.parametrize("g, dtype, target, want", [
    (_geometry((1, 64, 25, 5)), "float32", "c -mcpu=x86-64-v3", True),
    (_geometry((1, 64, 25, 5)), "float32", "c -mcpu=x86-64-v4", True),
    (_geometry((1, 64, 25, 5)), "float32", "c -mcpu=x86-64", False),  # SSE only: the planar schedule
    (_geometry((1, 64, 25, 5)), "float32", "c -mcpu=cortex-m7", False),
    (_geometry((1, 64, 25, 5)), "float16", "c -mcpu=x86-64-v3", False),
    (_geometry((1, 64, 25, 5), per_group=(1, 2)), "float32", "c -mcpu=x86-64-v3", False),  # channel multiplier 2
    (_geometry((1, 64, 25, 5), per_group=(2, 2)), "float32", "c -mcpu=x86-64-v3", False),  # grouped
    (_geometry((1, 96, 56, 56)), "float32", "c -mcpu=x86-64-v3", True),
    (_geometry((1, 96, 56, 56)), "float32", "c -mcpu=x86-64-v4", False),  # planar fuses the epilogue
    (_geometry((1, 96, 56, 56), strides=(2, 2)), "float32", "c -mcpu=x86-64-v4", True),
    (_geometry((1, 96, 28, 28)), "float32", "c -mcpu=x86-64-v4", True),
    (_geometry((1, 96, 56, 56), kernel=(7, 7)), "float32", "c -mcpu=x86-64-v4", True),
    (_geometry((1, 96, 1, 9000)), "float32", "c -mcpu=x86-64-v3", False),  # not one row fits the scratch
])
def test_which_convolutions_take_the_kernel(g, dtype, target, want):
    assert fits_depthwise(g, dtype, ScheduleContext(Target(target))) == want


def test_the_kernel_text_is_deterministic_and_names_its_block():
    first = tessera.build(_module((1, 9, 6, 6), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), target="c -mcpu=x86-64-v3")
    again = tessera.build(_module((1, 9, 6, 6), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), target="c -mcpu=x86-64-v3")
    assert first.c_sources == again.c_sources
    assert f"enum {{ B = {DEPTHWISE_BLOCK} }};" in "".join(first.c_sources.values())


def _const_module(x_shape, strides=(1, 1)):
    channels = x_shape[1]
    x = relay.Var("x", relay.TensorType(x_shape, "float32"))
    w = relay.const(np.random.default_rng(5).standard_normal((channels, 1, 3, 3)).astype(np.float32))
    y = conv.conv2d(x, w, strides=strides, padding=(1, 1, 1, 1), dilation=(1, 1), groups=channels)
    return relay.IRModule.from_expr(relay.Function([x], y))


@pytest.mark.parametrize("level, x_shape, default", [
    ("x86-64-v3", (1, 12, 25, 5), 1), ("x86-64-v4", (1, 12, 25, 5), 1),
    ("x86-64-v3", (1, 8, 56, 56), 1), ("x86-64-v4", (1, 8, 56, 56), 0),  # the planar default of AVX-512
])
def test_the_tuner_offers_both_schedules_with_the_rules_default(level, x_shape, default):
    tasks = [t for t in extract_tasks(_const_module(x_shape), f"c -mcpu={level}") if t.workload.op == WORKLOAD_OP]
    (task,) = tasks
    assert task.choice.default == {"channel_blocked": default}
    assert sorted(c["channel_blocked"] for c in task.choice.candidates) == [0, 1]
    assert task.choice.work == x_shape[1] * x_shape[2] * x_shape[3] * 9


def test_no_knob_where_the_kernel_cannot_run():
    assert not [t for t in extract_tasks(_const_module((1, 12, 25, 5)), "c -mcpu=x86-64")
                if t.workload.op == WORKLOAD_OP]


@pytest.mark.parametrize("level", LEVELS)
def test_a_log_picking_the_other_schedule_builds_it_and_the_same_numbers(level):
    mod, target = _const_module((1, 12, 25, 5), strides=(2, 2)), f"c -mcpu={level}"
    (task,) = [t for t in extract_tasks(mod, target) if t.workload.op == WORKLOAD_OP]
    log = TuningLog([Record(task.workload, {"channel_blocked": 0}, 1e-9, target, cpu=cpu_key())])
    plain = tessera.build(mod, target=target)
    planar = tessera.build(mod, target=target, ctx=PassContext(config={LOG_CONFIG_KEY: log}))
    assert f"{DEPTHWISE_SYMBOL}(" in "".join(plain.c_sources.values())
    assert f"{DEPTHWISE_SYMBOL}(" not in "".join(planar.c_sources.values())
    require_level(level)
    x = np.random.default_rng(6).standard_normal((1, 12, 25, 5)).astype(np.float32)
    np.testing.assert_allclose(planar(x)[0], plain(x)[0], rtol=1e-5, atol=1e-5)
