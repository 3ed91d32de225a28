"""TrimConvTaps and SplitDilatedConv: dilated convolutions whose taps mostly read padding, trimmed to their
reaching taps or split into pointwise pieces; PointwiseConvOnVectors: pointwise convolutions of one-position
maps as matrix products; PooledBranchAsBias: a projection's broadcast inputs as a bias (DeepLabV3's ASPP head
uses all four). Before/after IR and numerics against NumPy and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import relay
from tessera.frontend import from_onnx
from tessera.op import transform as tf
from tessera.op.nn import conv
from tessera.op.nn.conv import ConvAttrs, conv_reference
from tessera.op.nn.conv_regions import DimGeometry
from tessera.op.nn.matmul import matmul
from tessera.relay.expr import Call
from tessera.relay.visitor import post_order
from tessera.testing.aspp import aspp_head
from tessera.testing.isa import require_level
from tessera.testing.models import ort_session
from tessera.transform import InferType
from tessera.transform.pointwise_products import pointwise_convs_on_vectors
from tessera.transform.pooled_branch_bias import pooled_branches_as_bias
from tessera.transform.split_dilated_conv import MAX_PIECES, split_dilated_convs, split_pieces
from tessera.transform.trim_conv_taps import reaching_taps, trim_conv_taps, trimmed_attrs


def conv_module(shape: tuple[int, ...], out_channels: int, kernel: tuple[int, ...], strides: tuple[int, ...],
                dilation: tuple[int, ...], padding: tuple[int, ...], groups: int = 1,
                seed: int = 0) -> tuple[relay.IRModule, np.ndarray, ConvAttrs]:
    """A module of one convolution of a constant weight, that weight and the attributes."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((out_channels, shape[1] // groups, *kernel)).astype(np.float32)
    x = relay.Var("x", relay.TensorType(shape, "float32"))
    op = conv.CONV_BY_RANK[len(kernel)]
    body = op(x, relay.const(weight), strides=strides, padding=padding, dilation=dilation, groups=groups)
    mod = InferType()(relay.IRModule.from_expr(relay.Function((x,), body)))
    return mod, weight, ConvAttrs(strides, padding, dilation, groups)


def calls(mod: relay.IRModule, op: object) -> list[Call]:
    return [n for n in post_order(mod.main) if isinstance(n, Call) and n.op is op]


def check_numerics(mod: relay.IRModule, weight: np.ndarray, attrs: ConvAttrs, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    out = tessera.build(mod)(x)[0]
    np.testing.assert_allclose(out, conv_reference([x, weight], attrs), rtol=1e-4, atol=1e-4)


def test_reaching_taps_of_dilations_wider_than_the_map() -> None:
    assert reaching_taps(DimGeometry(14, 14, 3, 1, 24, 24)) == (1, 2)  # only the centre tap
    assert reaching_taps(DimGeometry(14, 14, 3, 1, 12, 12)) == (0, 3)  # each tap somewhere
    assert reaching_taps(DimGeometry(8, 8, 3, 1, 12, 0)) == (0, 1)  # no padding before: the first tap only
    assert reaching_taps(DimGeometry(4, 1, 1, 1, 1, 5)) == (0, 0)  # nothing reaches the input


@pytest.mark.parametrize("kernel, in_spatial, out_spatial, strides, dilation, padding, expected", [
    # ASPP's dilation 36 on 14x14: a 1x1 without padding and without dilation
    ((3, 3), (14, 14), (14, 14), (1, 1), (36, 36), (36,) * 4, ((0, 0, 0, 0), (1, 1), (slice(1, 2),) * 2)),
    # asymmetric, 26 before and 30 after along the rows: 22 outputs, only the centre tap reaches
    ((3, 3), (14, 14), (22, 14), (1, 1), (24, 1), (26, 1, 30, 1), ((2, 1, 6, 1), (1, 1), (slice(1, 2), slice(0, 3)))),
    # stride 2: outputs 0..6 of a 14 long input, taps of dilation 20 reach only at the centre
    ((3,), (14,), (7,), (2,), (20,), (20, 20), ((0, 0), (1,), (slice(1, 2),))),
    # 3-d: dilation 8 on 6^3 leaves the centre tap of each dim
    ((3, 3, 3), (6, 6, 6), (6, 6, 6), (1, 1, 1), (8, 8, 8), (8,) * 6, ((0,) * 6, (1, 1, 1), (slice(1, 2),) * 3)),
])
def test_trimmed_attrs(kernel, in_spatial, out_spatial, strides, dilation, padding, expected) -> None:
    got = trimmed_attrs(ConvAttrs(strides, padding, dilation), kernel, in_spatial, out_spatial)
    assert got is not None
    attrs, keep = got
    assert (attrs.padding, attrs.dilation, keep) == expected
    assert attrs.strides == strides


def test_trimmed_attrs_leave_reaching_kernels_alone() -> None:
    assert trimmed_attrs(ConvAttrs((1, 1), (1,) * 4, (1, 1)), (3, 3), (14, 14), (14, 14)) is None
    assert trimmed_attrs(ConvAttrs((1, 1), (12,) * 4, (12, 12)), (3, 3), (14, 14), (14, 14)) is None
    # only the centre tap of the rows reaches, but output 0 reads input row 12: no padding would make it a 1x1
    assert trimmed_attrs(ConvAttrs((1, 1), (12, 1, 30, 1), (24, 1)), (3, 3), (14, 14), (8, 14)) is None


def test_trim_makes_aspp_dilation_36_a_pointwise_convolution() -> None:
    mod, _, _ = conv_module((1, 8, 14, 14), 8, (3, 3), (1, 1), (36, 36), (36,) * 4)
    after = InferType()(relay.IRModule.from_expr(trim_conv_taps(mod.main, mod)))
    (call,) = calls(after, conv.conv2d)
    assert call.args[1].checked_type.shape == (8, 8, 1, 1)
    assert call.attrs == ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1)
    assert after.main.checked_type == mod.main.checked_type


@pytest.mark.parametrize("shape, kernel, strides, dilation, padding, groups", [
    ((1, 8, 14, 14), (3, 3), (1, 1), (24, 24), (24,) * 4, 1),  # wider than the map: trimmed to 1x1
    ((2, 8, 14, 14), (3, 3), (1, 1), (36, 36), (36,) * 4, 4),  # batched, grouped
    ((1, 6, 14, 14), (3, 3), (1, 1), (24, 1), (26, 1, 30, 1), 1),  # asymmetric, along the rows only
    ((1, 6, 15, 13), (3, 3), (2, 2), (20, 20), (20, 20, 21, 21), 1),  # stride 2 with dilation
    ((1, 6, 8), (3,), (1,), (12,), (12, 12), 1),  # 1-d
    ((1, 4, 6, 6, 6), (3, 3, 3), (1, 1, 1), (8, 8, 8), (8,) * 6, 1),  # 3-d
])
def test_trimmed_convolutions_match_numpy(shape, kernel, strides, dilation, padding, groups) -> None:
    mod, weight, attrs = conv_module(shape, 8, kernel, strides, dilation, padding, groups)
    check_numerics(mod, weight, attrs, shape)


def test_split_pieces_of_aspp_dilation_12() -> None:
    attrs = ConvAttrs((1, 1), (12,) * 4, (12, 12))
    pieces = split_pieces(attrs, (3, 3), (14, 14), (14, 14))
    assert pieces is not None and len(pieces) == 9
    sizes = [tuple(span.size for span in piece) for piece in pieces]
    assert sizes[0] == (14, 14)  # the centre tap, over the whole map, first
    assert sorted(sizes[1:]) == [(2, 2)] * 4 + [(2, 14)] * 2 + [(14, 2)] * 2
    assert sum(a * b for a, b in sizes) == 324  # of 9 x 196 tap-positions


def test_split_pieces_keep_dense_convolutions_whole() -> None:
    assert split_pieces(ConvAttrs((1, 1), (1,) * 4, (1, 1)), (3, 3), (14, 14), (14, 14)) is None  # undilated
    # dilation 12 on 28x28: the taps reach half the tap-positions
    assert split_pieces(ConvAttrs((1, 1), (12,) * 4, (12, 12)), (3, 3), (28, 28), (28, 28)) is None
    # 3-d dilation 4 on 6^3 (taps reaching 27% of the tap-positions): more than MAX_PIECES pieces
    assert split_pieces(ConvAttrs((1,) * 3, (4,) * 6, (4,) * 3), (3, 3, 3), (6,) * 3, (6,) * 3) is None
    assert MAX_PIECES < 27
    # 1-d with three taps: the centre alone reaches a third of the tap-positions (a pointwise piece would not pay)
    assert split_pieces(ConvAttrs((1,), (15, 15), (15,)), (3,), (16,), (16,)) is None


def test_split_runs_the_centre_as_one_pointwise_convolution_and_corners_as_products() -> None:
    mod, _, _ = conv_module((1, 16, 14, 14), 16, (3, 3), (1, 1), (12, 12), (12,) * 4)
    after = InferType()(relay.IRModule.from_expr(split_dilated_convs(mod.main, mod)))
    convs = calls(after, conv.conv2d)
    assert all(c.args[1].checked_type.shape == (16, 16, 1, 1) for c in convs)
    assert all(c.attrs == ConvAttrs((1, 1), (0,) * 4, (1, 1), 1) for c in convs)
    assert len(convs) == 5 and len(calls(after, matmul)) == 4  # centre and edges; the 2x2 corners
    assert len(calls(after, tf.strided_slice)) == 8  # every piece but the centre reads a box of the input
    assert after.main.checked_type == mod.main.checked_type


@pytest.mark.parametrize("shape, kernel, strides, dilation, padding, groups", [
    ((1, 16, 14, 14), (3, 3), (1, 1), (12, 12), (12,) * 4, 1),  # ASPP's: centre, edges, corners
    ((2, 8, 14, 14), (3, 3), (1, 1), (12, 12), (12,) * 4, 1),  # batched: the corners' products take two images
    ((2, 8, 14, 14), (3, 3), (1, 1), (12, 12), (12,) * 4, 2),  # batched, grouped (corners as convolutions)
    ((1, 6, 14, 13), (3, 3), (1, 1), (11, 12), (13, 10, 9, 14), 1),  # asymmetric pads
    ((1, 6, 27, 27), (3, 3), (2, 2), (20, 20), (20,) * 4, 1),  # stride 2 with dilation
    ((1, 4, 5, 5, 5), (3, 1, 3), (1, 1, 1), (4, 1, 4), (4, 0, 4, 4, 0, 4), 1),  # 3-d
])
def test_split_convolutions_match_numpy(shape, kernel, strides, dilation, padding, groups) -> None:
    mod, weight, attrs = conv_module(shape, 8, kernel, strides, dilation, padding, groups)
    out_spatial = mod.main.checked_type.ret_type.shape[2:]
    assert split_pieces(attrs, kernel, shape[2:], out_spatial) is not None  # the case is one the pass splits
    check_numerics(mod, weight, attrs, shape)


@pytest.mark.parametrize("target", ["c", "c -mcpu=x86-64-v3"])
def test_aspp_head_matches_onnxruntime(target: str) -> None:
    if target != "c":
        require_level(target.split("=")[1])
    model = aspp_head(channels=32)  # 14x14: dilation 12 split, 24 and 36 trimmed to 1x1
    x = np.random.default_rng(1).standard_normal((1, 32, 14, 14)).astype(np.float32)
    mod, params = from_onnx(model)
    out = tessera.build(mod, target=target, params=params)(x)[0]
    np.testing.assert_allclose(out, ort_session(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_pointwise_convolution_of_a_pooled_vector_becomes_a_product() -> None:
    mod, _, _ = conv_module((2, 16, 1, 1), 24, (1, 1), (1, 1), (1, 1), (0,) * 4)
    after = InferType()(relay.IRModule.from_expr(pointwise_convs_on_vectors(mod.main, mod)))
    assert not calls(after, conv.conv2d)
    (product,) = calls(after, matmul)
    assert product.args[1].checked_type.shape == (16, 24)  # the weight, transposed at compile time
    assert after.main.checked_type == mod.main.checked_type


@pytest.mark.parametrize("shape, kernel, padding, groups", [
    ((1, 16, 2, 1), (1, 1), (0,) * 4, 1),  # two positions
    ((1, 16, 1, 1), (1, 1), (0,) * 4, 4),  # grouped
    ((1, 16, 1, 1), (3, 3), (1,) * 4, 1),  # not pointwise (TrimConvTaps makes it so first, in the pipeline)
])
def test_other_convolutions_stay(shape, kernel, padding, groups) -> None:
    mod, _, _ = conv_module(shape, 8, kernel, (1, 1), (1, 1), padding, groups)
    assert pointwise_convs_on_vectors(mod.main, mod) is mod.main


@pytest.mark.parametrize("shape", [(1, 16, 1, 1), (3, 16, 1, 1), (2, 16, 1)])
def test_pointwise_convolutions_of_vectors_match_numpy(shape) -> None:
    d = len(shape) - 2
    mod, weight, attrs = conv_module(shape, 24, (1,) * d, (1,) * d, (1,) * d, (0,) * (2 * d))
    check_numerics(mod, weight, attrs, shape)


def test_a_padded_3x3_on_a_pooled_vector_is_trimmed_then_a_product() -> None:
    # the pipeline: TrimConvTaps leaves the centre tap, PointwiseConvOnVectors makes it a product
    mod, weight, attrs = conv_module((1, 8, 1, 1), 8, (3, 3), (1, 1), (1, 1), (1,) * 4)
    check_numerics(mod, weight, attrs, (1, 8, 1, 1))
    assert trimmed_attrs(attrs, (3, 3), (1, 1), (1, 1)) is not None


def pooled_projection(batch: int = 1, pooled_first: bool = False) -> tuple[relay.IRModule, list[np.ndarray]]:
    """conv1x1(concat(a, b, broadcast_to(v)), W) over a 5x6 map (v first with `pooled_first`), and its operands."""
    rng = np.random.default_rng(2)
    a = relay.Var("a", relay.TensorType((batch, 4, 5, 6), "float32"))
    b = relay.Var("b", relay.TensorType((batch, 3, 5, 6), "float32"))
    v = relay.Var("v", relay.TensorType((batch, 2, 1, 1), "float32"))
    weight = rng.standard_normal((7, 9, 1, 1)).astype(np.float32)
    spread = tf.broadcast_to(v, shape=(batch, 2, 5, 6))
    parts = [spread, a, b] if pooled_first else [a, b, spread]
    body = conv.conv2d(tf.concatenate(*parts, axis=1), relay.const(weight), strides=(1, 1), padding=(0,) * 4,
                       dilation=(1, 1))
    mod = InferType()(relay.IRModule.from_expr(relay.Function((a, b, v), body)))
    inputs = [rng.standard_normal(p.checked_type.shape).astype(np.float32) for p in mod.main.params]
    return mod, [weight, *inputs]


def test_the_pooled_branch_of_a_projection_becomes_a_bias() -> None:
    mod, _ = pooled_projection()
    after = InferType()(relay.IRModule.from_expr(pooled_branches_as_bias(mod.main, mod)))
    assert not calls(after, tf.broadcast_to)
    shapes = sorted(c.args[1].checked_type.shape for c in calls(after, conv.conv2d))
    assert shapes == [(7, 2, 1, 1), (7, 7, 1, 1)]  # the vector's columns; those of the concatenated maps
    (cat,) = calls(after, tf.concatenate)
    assert len(cat.args) == 2
    assert after.main.checked_type == mod.main.checked_type


def test_a_projection_without_broadcast_inputs_stays() -> None:
    x = relay.Var("x", relay.TensorType((1, 4, 5, 6), "float32"))
    w = relay.const(np.ones((3, 8, 1, 1), np.float32))
    body = conv.conv2d(tf.concatenate(x, x, axis=1), w, strides=(1, 1), padding=(0,) * 4, dilation=(1, 1))
    mod = InferType()(relay.IRModule.from_expr(relay.Function((x,), body)))
    assert pooled_branches_as_bias(mod.main, mod) is mod.main


@pytest.mark.parametrize("batch, pooled_first", [(1, False), (2, True)])
def test_pooled_projections_match_numpy(batch: int, pooled_first: bool) -> None:
    mod, (weight, a, b, v) = pooled_projection(batch, pooled_first)
    out = tessera.build(mod)(a, b, v)[0]
    spread = np.broadcast_to(v, (batch, 2, 5, 6))
    cat = np.concatenate([spread, a, b] if pooled_first else [a, b, spread], axis=1)
    np.testing.assert_allclose(out, np.einsum("nchw,oc->nohw", cat, weight[:, :, 0, 0]), rtol=1e-4, atol=1e-4)
