"""hypothesis as the fuzz generator's Chooser: every decision is a draw, so failures shrink."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

from tessera.testing.fuzz.check import Invalid, Kind, Outcome, reference, run_case
from tessera.testing.fuzz.generate import Case, case_summary
from tessera.testing.fuzz.graph import Reject

T = TypeVar("T")



def fuzz_settings(examples: int) -> settings:
    """The CI budget: derandomized (the same examples on every run and machine), no example
    database, no deadline (each example compiles C)."""
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


class HypothesisChooser:
    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def choice(self, options: Sequence[T]) -> T:
        if not options:
            raise Reject("nothing to choose from")
        return self.data.draw(st.sampled_from(list(options)))

    def boolean(self, p: float = 0.5) -> bool:
        # shrinks towards False: optional features off
        return self.data.draw(st.integers(0, 99)) >= round(100 * (1 - p))


def check_case(make: Callable[[HypothesisChooser], Case], data: st.DataObject) -> Outcome:
    """Generate a case, run it on the reference and on tessera; fail unless tessera passes or refuses."""
    try:
        case = make(HypothesisChooser(data))
        expected = reference(case)
    except (Reject, Invalid):
        assume(False)
        raise AssertionError("unreachable")
    outcome = run_case(case, expected)
    if outcome.failed:
        import onnx.printer

        raise AssertionError(f"{outcome.kind.value}: {outcome.detail}\n{case_summary(case)}\n"
                             f"{onnx.printer.to_text(case.model)}\ninputs: {case.feeds}")
    assert outcome.kind in (Kind.PASSED, Kind.REFUSED)
    return outcome
