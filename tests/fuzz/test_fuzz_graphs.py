"""Random valid ONNX graphs (1-6 nodes over the operators tessera claims) against onnxruntime.

A bounded, derandomized slice of what `scripts/fuzz.py` runs at length:
each example is a graph onnx.checker accepts (strict shape inference) and
onnxruntime runs without optimisations; tessera must match it (exactly
for integers, booleans and exact float graphs; NaN positions always) or
refuse it cleanly as unsupported. The targeted tests below draw from one
family of operators each, so each family gets examples of its own.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.testing.fuzz.generate import generate_case
from tessera.testing.fuzz.spec import FAMILIES, REGISTRY

from .strategies import check_case, fuzz_settings


@fuzz_settings(100)
@given(st.data())
def test_random_graphs_match_onnxruntime(data: st.DataObject) -> None:
    check_case(generate_case, data)


@pytest.mark.parametrize("families", [("unary", "binary"), ("movement", "index"), ("reduce", "nn", "norm")],
                         ids=["elementwise", "data-movement", "reductions-nn"])
def test_operator_families_match_onnxruntime(families: tuple[str, ...]) -> None:
    @fuzz_settings(25)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        check_case(lambda c: generate_case(c, families=families, max_nodes=3), data)

    run()


def test_generators_cover_every_claimed_operator_family() -> None:
    """Every family has generators, and together they cover most of tessera's ONNX operators."""
    from tessera.frontend.onnx import ops  # noqa: F401  (registers converters)
    from tessera.frontend.onnx.registry import CONVERTERS

    assert all(REGISTRY.specs(f) for f in FAMILIES)
    claimed = set(CONVERTERS.op_types())
    generated = REGISTRY.op_types()
    assert generated <= claimed, f"generators for operators tessera does not claim: {generated - claimed}"
    assert len(generated) >= 0.8 * len(claimed), f"only {len(generated)} of {len(claimed)} operators generated"
