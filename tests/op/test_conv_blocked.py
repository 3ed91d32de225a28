"""Dense convolutions vectorised across output channels: `nn.conv2d_blocked` (op/nn/conv_blocked.py), the
weight packing PackGemmWeights writes for it, and which convolutions get it per ISA level."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.errors import TypeInferenceError
from tessera.op import elemwise as ew
from tessera.op.nn import conv
from tessera.op.nn.conv import ConvAttrs, conv_reference
from tessera.op.nn.conv_blocked import (blocked_block, conv2d_blocked, pack_blocked_weights, row_tile,
                                        unpack_blocked_weights)
from tessera.relay.visitor import iter_calls
from tessera.target import Target
from tessera.target.simd import missing_level_features
from tessera.testing.isa import require_level
from tessera.transform.infer_type import infer_function
from tessera.transform.pack_gemm_weights import pack_gemm_weights

V3, V4 = "c -mcpu=x86-64-v3", "c -mcpu=x86-64-v4"


def _attrs(strides=(1, 1), padding=(1, 1, 1, 1), groups=1, dilation=(1, 1)) -> ConvAttrs:
    return ConvAttrs(strides, padding, dilation, groups)


def _conv_function(shape, weight, attrs: ConvAttrs, bias=None) -> relay.Function:
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    y = conv.conv2d(x, relay.const(weight), strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation,
                    groups=attrs.groups)
    if bias is not None:
        y = ew.relu(ew.add(y, relay.const(bias.reshape(-1, 1, 1))))
    return relay.Function((x,), y)


def test_packed_weights_round_trip_and_reject_ragged_blocks():
    w = np.arange(64 * 5 * 3 * 3, dtype=np.float32).reshape(64, 5, 3, 3)
    packed = pack_blocked_weights(w, 32)
    assert packed.shape == (2, 5, 3, 3, 32)
    assert packed[1, 4, 2, 0, 7] == w[39, 4, 2, 0]  # block 1, lane 7: output channel 32 + 7
    np.testing.assert_array_equal(unpack_blocked_weights(packed), w)
    with pytest.raises(ValueError, match="48 output channels do not split into blocks of 32"):
        pack_blocked_weights(w[:48], 32)


@pytest.mark.parametrize("width, tile", [(7, 7), (14, 7), (8, 8), (56, 8), (13, 7), (10, 6), (27, 7), (5, 6)])
def test_row_tiles_fit_the_avx512_registers_and_waste_least(width, tile):
    # 32 channels = 2 zmm per output: 6 to 8 outputs (12-16 accumulators, at most 256 tile elements)
    assert row_tile(width, 32, 16) == tile


@pytest.mark.parametrize("width", [7, 14, 8, 56, 13])
def test_avx2_row_tiles_hold_four_outputs(width):
    # 16 channels = 2 ymm per output: 4 outputs (8 accumulators, 2 weight vectors, a broadcast)
    assert row_tile(width, 16, 8) == 4
    assert row_tile(width, 32, 8) is None  # 4 ymm per output: not even 4 outputs fit


def test_row_tiles_need_a_known_register_file():
    assert row_tile(7, 32, 4) is None  # 4 lanes: SSE or NEON, register count unknown


@pytest.mark.parametrize("target, in_hw, oc, kernel, attrs, expected", [
    (V4, (7, 7), 512, (3, 3), _attrs(), 32),                          # 49 of 64 planar lanes: blocked
    (V4, (14, 14), 256, (3, 3), _attrs(), 32),
    (V4, (16, 16), 64, (3, 3), _attrs(strides=(2, 2)), 32),            # stride 2 onto 8x8
    (V4, (56, 56), 64, (3, 3), _attrs(), None),                        # planar tiles fill 96% of their lanes
    (V4, (7, 7), 48, (3, 3), _attrs(), None),                          # 48 channels: no blocks of 32
    (V4, (7, 7), 512, (3, 3), _attrs(groups=2), None),                 # grouped
    (V4, (7, 7), 512, (3, 3), _attrs(padding=(2, 2, 2, 2), dilation=(2, 2)), None),  # dilated: regions
    (V4, (7, 7), 512, (1, 1), _attrs(padding=(0, 0, 0, 0)), None),     # 1x1: the GEMM paths
    (V4, (13, 13), 256, (3, 3), _attrs(), 32),                         # tiles of 7: 14 columns for 13
    (V4, (224, 224), 64, (7, 7), _attrs(strides=(2, 2), padding=(3, 3, 3, 3)), None),  # the stem: 97% filled
    (V3, (7, 7), 512, (3, 3), _attrs(), 16),                           # AVX2: 2 ymm of channels
    (V3, (7, 7), 40, (3, 3), _attrs(), None),
    ("c -march=armv8-a", (7, 7), 512, (3, 3), _attrs(), None),
])
def test_which_convolutions_are_blocked(target, in_hw, oc, kernel, attrs, expected):
    out_hw = tuple(conv.conv_output_size(in_hw[k], kernel[k], attrs.strides[k], attrs.dilation[k],
                                         attrs.padding[k], attrs.padding[2 + k]) for k in range(2))
    assert blocked_block(Target(target), in_hw, oc, out_hw, kernel, attrs) == expected


# maps the blocked tiles still take: on AVX2 an 8x8 map goes to the planes GEMM (conv_planes_gemm), a 4x4 not
SMALL_MAP = {V4: 8, V3: 4}


@pytest.mark.parametrize("target, block", [(V4, 32), (V3, 16)])
def test_the_pass_packs_blocked_weights_in_blocks_of_two_vectors(target, block):
    w = np.random.default_rng(0).standard_normal((64, 16, 3, 3)).astype(np.float32)
    side = SMALL_MAP[target]
    func = infer_function(_conv_function((1, 16, side, side), w, _attrs()))
    (call,) = [c for c in iter_calls(pack_gemm_weights(func, Target(target)).body)]
    assert call.op is conv2d_blocked and call.args[1].data.shape == (64 // block, 16, 3, 3, block)


def test_the_pass_leaves_targets_without_a_known_register_file():
    w = np.random.default_rng(0).standard_normal((64, 16, 3, 3)).astype(np.float32)
    func = infer_function(_conv_function((1, 16, 8, 8), w, _attrs()))
    assert pack_gemm_weights(func, Target("c -march=armv8-a")) is func


# (input NCHW, output channels, kernel, strides, padding (t, l, b, r)): odd sizes, stride 2 onto odd
# maps, asymmetric padding, input channels not a multiple of the vector width, a 5x5 and a 7x7 kernel,
# rows that the tiles do not divide
CASES = [
    ((1, 5, 7, 7), 32, (3, 3), (1, 1), (1, 1, 1, 1)),
    ((2, 3, 15, 15), 64, (3, 3), (2, 2), (1, 1, 1, 1)),
    ((1, 17, 14, 14), 32, (3, 3), (1, 1), (0, 1, 2, 1)),
    ((1, 8, 16, 11), 32, (5, 5), (2, 1), (2, 2, 2, 2)),
    ((1, 3, 20, 20), 32, (7, 7), (2, 2), (3, 3, 3, 3)),
    ((1, 4, 13, 13), 32, (3, 3), (1, 1), (1, 1, 1, 1)),  # the last tile of each row reaches past it
    ((1, 4, 13, 27), 32, (3, 3), (2, 2), (1, 0, 1, 2)),  # ... with stride 2
]


@pytest.mark.parametrize("shape, oc, kernel, strides, padding", CASES)
def test_blocked_convolutions_match_the_reference(shape, oc, kernel, strides, padding):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((oc, shape[1], *kernel)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    attrs = _attrs(strides, padding)
    expected = np.maximum(conv_reference([x, w], attrs) + b.reshape(-1, 1, 1), 0)
    # the op itself (whatever the pass would choose), with a fused bias and ReLU; each level with the
    # other's block too (32 channels at x86-64-v3: tiles of one column, still correct)
    for block, target, level in ((32, V4, "x86-64-v4"), (16, V3, "x86-64-v3"), (32, V3, "x86-64-v3")):
        xv = relay.Var("x", relay.TensorType(shape, "float32"))
        y = conv2d_blocked(xv, relay.const(pack_blocked_weights(w, block)), strides=strides, padding=padding,
                           dilation=(1, 1))
        mod = relay.IRModule.from_expr(relay.Function((xv,), ew.relu(ew.add(y, relay.const(b.reshape(-1, 1, 1))))))
        lib = tessera.build(mod, target=target)
        assert "conv2d_blocked" in "".join(lib.c_sources.values())
        require_level(level)
        np.testing.assert_allclose(lib(x)[0], expected, rtol=1e-4, atol=1e-4, err_msg=f"{target}, {block}")


@pytest.mark.parametrize("target, level", [(V4, "x86-64-v4"), (V3, "x86-64-v3")])
def test_a_model_runs_its_small_maps_blocked(target, level):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    side = SMALL_MAP[target]
    x = rng.standard_normal((1, 32, side, side)).astype(np.float32)
    lib = tessera.build(relay.IRModule.from_expr(_conv_function((1, 32, side, side), w, _attrs(), b)), target=target)
    assert "conv2d_blocked" in "".join(lib.c_sources.values())
    require_level(level)
    expected = np.maximum(conv_reference([x, w], _attrs()) + b.reshape(-1, 1, 1), 0)
    np.testing.assert_allclose(lib(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_the_type_relation_names_what_does_not_fit():
    x = relay.Var("x", relay.TensorType((1, 6, 7, 7), "float32"))
    wp = relay.const(np.zeros((1, 5, 3, 3, 32), np.float32))
    with pytest.raises(TypeInferenceError, match=r"6 input channels do not fit a packed weight \(1, 5, 3, 3, 32\)"):
        infer_function(relay.Function((x,), conv2d_blocked(x, wp, strides=(1, 1), padding=(1, 1, 1, 1),
                                                           dilation=(1, 1))))
    flat = relay.const(np.zeros((32, 6, 3, 3), np.float32))
    with pytest.raises(TypeInferenceError, match="needs NCHW data and a packed weight"):
        infer_function(relay.Function((x,), conv2d_blocked(x, flat, strides=(1, 1), padding=(1, 1, 1, 1),
                                                           dilation=(1, 1))))


@pytest.mark.parametrize("target, level, rows", [(V4, "x86-64-v4", [4, 5, 6, 7, 8]), (V3, "x86-64-v3", [4, 5, 6])])
def test_every_row_tile_the_tuner_may_choose_computes_the_same_result(target, level, rows):
    from tessera.backend.build_module import build_graph, fuse, lower_fused
    from tessera.transform import PassContext
    from tessera.tune import extract_tasks

    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 6, 3, 3)).astype(np.float32)
    side = SMALL_MAP[target]
    x = rng.standard_normal((1, 6, side, side)).astype(np.float32)
    mod = relay.IRModule.from_expr(_conv_function((1, 6, side, side), w, _attrs(strides=(1, 1))))
    (task,) = [t for t in extract_tasks(mod, target) if t.workload.op == "conv2d_blocked"]
    assert [c["row"] for c in task.choice.candidates] == rows  # those whose accumulators fit the registers
    expected = conv_reference([x, w], _attrs())
    ctx, quiet = PassContext(), lambda msg: None
    for config in task.choice.candidates:
        fused = fuse(mod, Target(target), None, ctx, quiet, "default")
        lib = build_graph(lower_fused(fused, Target(target), ctx, quiet, "default",
                                      forced={task.workload: config}), quiet)
        assert f"float conv2d_tile[{config['row'] * (32 if level == 'x86-64-v4' else 16)}];" in \
            "".join(lib.c_sources.values())
        if not missing_level_features(level):  # built for every level, run where this CPU can
            np.testing.assert_allclose(lib(x)[0], expected, rtol=1e-4, atol=1e-4, err_msg=str(config))
