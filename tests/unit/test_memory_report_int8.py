"""`tessera compile --memory-report` sets an int8 model's pool beside its int8 activation bound."""

from __future__ import annotations

import logging
import re

import onnx

from tessera.backend.int8_bound import int8_activation_bound
from tessera.backend.memory_report import memory_report
from tessera.cli import main
from tessera.frontend import from_onnx
from tessera.testing import int8_bound as testing_int8_bound
from tessera.testing import mlperf_tiny
from tessera.testing import mlperf_tiny_int8 as q8

logging.getLogger().setLevel(logging.ERROR)
M4 = "c -mcpu=cortex-m4"
BOUND_LINE = re.compile(r"int8 activation bound: (\d+) bytes .*; pools (\d+) bytes = ([\d.]+) x the bound")


def test_testing_keeps_the_bound_under_its_old_name():
    assert testing_int8_bound.int8_activation_bound is int8_activation_bound


def test_cli_memory_report_shows_the_pool_beside_the_int8_bound(tmp_path, capsys):
    model = q8.model_path("kws_ds_cnn")
    tar, svg = tmp_path / "kws.tar", tmp_path / "kws.svg"
    assert main(["compile", str(model), "-t", M4, "-o", str(tar), "--memory-report", str(svg), "-q"]) == 0
    out = capsys.readouterr().out
    found = BOUND_LINE.search(out)
    assert found, out
    bound, pool, ratio = int(found[1]), int(found[2]), float(found[3])
    assert bound == 2 * 64 * 25 * 5  # kws: the depthwise conv on 64 channels of 25x5, input + output
    pools = re.search(r"pools pool (\d+) B", out)
    assert pools and pool == int(pools[1])  # the same figure the export reports
    assert ratio == round(pool / bound, 3) and 1.0 <= ratio <= 1.25
    assert "int8 activation bound" in svg.read_text()


def test_a_float_model_reports_no_int8_bound(tmp_path, capsys):
    model = mlperf_tiny.model_path("ad_autoencoder")
    assert main(["compile", str(model), "-t", M4, "-o", str(tmp_path / "ad.tar"),
                 "--memory-report", str(tmp_path / "ad.svg"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "memory:" in out and "int8 activation bound" not in out


def test_the_report_ratio_is_the_pool_over_the_bound():
    import tessera

    mod, params = from_onnx(onnx.load(q8.model_path("ad_autoencoder")))
    lib = tessera.build(mod, target=M4, params=params, executor="aot", mod_name="ad")
    bound = int8_activation_bound(mod, params)
    text = memory_report(lib, bound).text()
    assert f"int8 activation bound: {bound} bytes" in text
    assert f"pools {lib.program.pool_size} bytes = {lib.program.pool_size / bound:.3f} x the bound" in text
    assert "int8 activation bound" not in memory_report(lib).text()
