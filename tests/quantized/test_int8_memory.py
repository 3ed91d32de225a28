"""The int8 activation bound and the planned pools of the MLPerf Tiny int8 models (compile time, no QEMU)."""

from __future__ import annotations

import logging

import onnx
import pytest

from tessera.frontend import from_onnx
from tessera.testing import mlperf_tiny_int8 as q8
from tessera.testing.int8_bound import int8_activation_bound, layer_int8_bytes

logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice


def _model(name: str):
    return from_onnx(onnx.load(q8.model_path(name)))


def test_the_bound_is_the_largest_layers_int8_reads_and_writes():
    # kws: a depthwise conv on 64 channels of 25x5, in + out
    assert int8_activation_bound(*_model("kws_ds_cnn")) == 2 * 64 * 25 * 5 == 16_000
    # ic: a residual add reads two 16x32x32 tensors and writes a third
    mod, params = _model("ic_resnet8")
    layers = layer_int8_bytes(mod, params)
    assert max(layers, key=lambda t: t[1]) == ("qnn.add", 3 * 16 * 32 * 32)
    assert int8_activation_bound(mod, params) == 49_152
    # ad: the dense layer 640 -> 128 on the quantised input (the float input itself is the caller's)
    assert int8_activation_bound(*_model("ad_autoencoder")) == 640 + 128 == 768
    # vww: the pointwise conv 8 -> 16 channels at 48x48
    assert int8_activation_bound(*_model("vww_mobilenet")) == (8 + 16) * 48 * 48 == 55_296


def test_a_float_model_has_no_int8_bound():
    from tessera.testing import mlperf_tiny

    assert int8_activation_bound(*from_onnx(onnx.load(mlperf_tiny.model_path("ad_autoencoder")))) == 0


@pytest.mark.parametrize("name", ["kws_ds_cnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder"])
def test_planned_pool_is_within_a_quarter_of_the_int8_bound(name):
    """Issue 15's memory bar on the Cortex-M4 board: pool <= 1.25 x the largest layer's int8 reads + writes.
    Compile time only: the pool is planned before any C is compiled."""
    import tessera
    from tessera.micro.boards import BOARDS

    mod, params = _model(name)
    lib = tessera.build(mod, target=BOARDS["mps2-an386"].target_string, params=params, executor="aot", mod_name=name)
    bound = int8_activation_bound(mod, params)
    assert lib.program.pool_size <= 1.25 * bound, (lib.program.pool_size, bound)


def test_im2col_and_padding_scratch_is_one_row_or_plane():
    """ResNet-8's 3x3 convolutions build im2col one output row at a time (32 positions x 9 taps x 16 channels,
    not the whole 32x32 image), and a depthwise convolution pads one channel plane at a time."""
    import tessera
    from tessera.backend.lift_workspace import workspace_params
    from tessera.micro.boards import BOARDS

    def scratch(name: str) -> dict[str, set[tuple[int, ...]]]:
        mod, params = _model(name)
        lib = tessera.build(mod, target=BOARDS["mps2-an386"].target_string, params=params, executor="aot",
                            mod_name=name)
        found: dict[str, set[tuple[int, ...]]] = {}
        for func in lib.program.kernels.values():
            for buf in workspace_params(func):
                found.setdefault(buf.name, set()).add(buf.shape)
        return found

    ic = scratch("ic_resnet8")
    # channels innermost on Cortex-M (Int8Layout): each window is (ky, kx, c)
    assert (1, 1, 32, 3, 3, 16) in ic["im2col_buf"]  # one row of the 32x32 convolutions
    assert all(shape[1] == 1 for shape in ic["im2col_buf"] if shape[3:5] == (3, 3))
    kws = scratch("kws_ds_cnn")
    assert (1, 1, 27, 7) in kws["pad_buf"]  # one padded 25x5 plane of the depthwise convolutions
    assert (1, 64, 27, 7) not in kws["pad_buf"]


def test_residual_adds_run_in_the_convolution_that_makes_one_operand():
    """ResNet-8's three residual qnn.add ops fuse into the epilogue of the convolution before them, so
    the convolution's int8 output never reaches the planner: the pool is below the int8 bound of the
    add layer (two operands + result), which an unfused plan must hold at once."""
    import tessera
    from tessera.micro.boards import BOARDS

    mod, params = _model("ic_resnet8")
    lib = tessera.build(mod, target=BOARDS["mps2-an386"].target_string, params=params, executor="aot",
                        mod_name="ic")
    names = [name.removeprefix("tsgen_ic_") for name in lib.program.kernels]
    assert [n for n in names if n.startswith("fused_add")] == []
    assert sum(1 for n in names if n.startswith("fused_conv2d") and "_add" in n) == 3
    assert lib.program.pool_size < int8_activation_bound(mod, params)
