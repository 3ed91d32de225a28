"""tir/int8_dot_rows.py: a paired channel loop with an even number of pairs (a dense layer, the last
position of an odd-sized convolution) visits four weight rows per iteration with one DOT4_INT8 call
(`ts_dot4_int8`). The helper's ISA paths on the boards: test_int8_dot_quads.py."""

from __future__ import annotations

import pytest

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Scope
from tessera.tir.int8_dot import use_int8_dot
from tessera.tir.int8_dot_pairs import pair_int8_dots
from tessera.tir.int8_dot_rows import row_int8_dots

from .test_int8_dot_quads import _calls, _loads, _passes, _run_on_host, _source, position_dots


def _dense(channels: int, n: int = 37) -> S.PrimFunc:
    """One position (a dense layer): out[c] = clamp(sum_k a[k] * w[c, k] - 5)."""
    return position_dots(positions=1, channels=channels, n=n)


def test_four_rows_per_call_against_one_run():
    func = row_int8_dots(_passes(_dense(channels=8)))
    (call,) = _calls(func)
    assert call.func is E.Intrinsic.DOT4_INT8 and call.dtype == "void"
    run, rows, row_step, n, *accs = call.args
    assert (run.buffer.name, rows.buffer.name) == ("a", "w")
    assert (row_step.value, n.value) == (37, 37)
    assert len({id(a.buffer) for a in accs}) == 4 and all(a.buffer.scope is Scope.LOCAL for a in accs)
    loops = [s for s in S.walk_stmts(func.body) if isinstance(s, S.For)]
    assert [(f.loop_var.name, f.extent.value) for f in loops] == [("p", 1), ("c4", 2)]
    # rows 4*c4 .. 4*c4 + 3 each stored once from their own accumulator, in the call's order
    stores = [s for s in S.walk_stmts(func.body) if isinstance(s, S.BufferStore) and s.buffer.name == "out"]
    read = [next(x.buffer for x in _loads(s.value) if x.buffer.scope is Scope.LOCAL) for s in stores]
    assert [id(b) for b in read] == [id(a.buffer) for a in accs]
    assert "ts_dot4_int8(&a[(p * 37)], &w[(((c4 * 2) * 2) * 37)], 37, 37, &acc0_0, &acc1_0, &acc0_1, &acc1_1);" \
        in _source(func)


@pytest.mark.parametrize(("channels", "n"), [(8, 37), (12, 45), (8, 3)],
                         ids=["byte tail", "every DSP step", "short run"])
def test_the_calls_compute_the_loops(channels, n):
    func = row_int8_dots(_passes(_dense(channels=channels, n=n)))
    assert [c.func for c in _calls(func)] == [E.Intrinsic.DOT4_INT8]
    _run_on_host(func, 1, channels, n, n)


def test_an_odd_number_of_pairs_is_left_alone():
    func = pair_int8_dots(use_int8_dot(_dense(channels=6)))
    assert row_int8_dots(func) is func


def test_the_quads_of_a_position_loop_are_left_alone():
    func = _passes(position_dots(positions=4, channels=4))
    assert row_int8_dots(func) is func
