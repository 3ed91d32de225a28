"""Run one case on onnxruntime (the reference) and on tessera, and classify it.

The reference is onnxruntime with graph optimisations off, after
onnx.checker with full (strict) shape inference: a graph either fails there
(`Invalid`, not a tessera case at all) or its outputs are the truth.
tessera's outcome is one of `Kind`: a clean refusal is an
`UnsupportedOperatorError` (the importer's "operator X is not supported"
family); any other `TesseraError` on a graph the reference runs is a
failure, as is a non-TesseraError exception (an internal error).
"""

from __future__ import annotations

import enum
import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from .generate import Case, Tolerance

SAFETY = 8.0  # the derived error bounds are estimates: allow this factor on top
BOUND_CAP = 1e3  # a loose bound on an output's values widens its tolerance this much at most


class Kind(str, enum.Enum):
    PASSED = "passed"
    REFUSED = "refused (unsupported)"
    WRONG = "wrong result"
    CRASH = "crash (signal)"
    HANG = "hang (timeout)"
    INTERNAL = "internal error (not a TesseraError)"
    ERROR = "TesseraError on a valid model"


FAILURES = (Kind.WRONG, Kind.CRASH, Kind.HANG, Kind.INTERNAL, Kind.ERROR)


class Invalid(Exception):
    """The reference rejects the graph (checker or onnxruntime): not a case."""


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES

    @property
    def signature(self) -> str:
        """The first line of the detail with numbers and names blurred, to group repeats."""
        first = self.detail.strip().splitlines()[0] if self.detail.strip() else ""
        first = re.sub(r"'[^']*'", "'_'", first)
        return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", first)[:160]


# -------------------------------------------------------------- reference
def reference(case: Case) -> list[np.ndarray]:
    import onnxruntime as ort

    ort.set_default_logger_severity(4)
    try:
        onnx.checker.check_model(case.model, full_check=True)
    except Exception as err:
        raise Invalid(f"onnx.checker: {err}") from None
    options = ort.SessionOptions()
    options.log_severity_level = 4  # errors reach us as exceptions: no log lines
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return [np.asarray(o) for o in session.run(None, case.feeds)]
    except Exception as err:
        raise Invalid(f"onnxruntime: {str(err).splitlines()[0]}") from None


# ---------------------------------------------------------------- tessera
def run_tessera(case: Case) -> list[np.ndarray]:
    from tessera.backend.build_module import build
    from tessera.frontend.onnx import from_onnx

    mod, params = from_onnx(case.model)
    if case.executor == "aot":
        outputs = build(mod, params=params, executor="aot").run_host(list(case.feeds.values()))
    elif case.executor == "graph":
        outputs = build(mod, params=params, executor="graph")(*case.feeds.values())
    else:
        raise ValueError(f"unknown executor {case.executor!r} in a fuzz case; expected 'graph' or 'aot'")
    return [np.asarray(o) for o in outputs]


def classify_error(err: BaseException) -> Outcome:
    from tessera.errors import TesseraError, UnsupportedOperatorError

    text = f"{type(err).__name__}: {err}"
    if isinstance(err, UnsupportedOperatorError):
        return Outcome(Kind.REFUSED, text)
    if isinstance(err, TesseraError):
        return Outcome(Kind.ERROR, text)
    return Outcome(Kind.INTERNAL, text + "\n" + "".join(traceback.format_tb(err.__traceback__)[-6:]))


# ---------------------------------------------------------------- compare
def compare(name: str, expected: np.ndarray, actual: np.ndarray, tol: Tolerance) -> str | None:
    """None if `actual` matches, else what differs.

    Integers and booleans compare exactly, floats exactly where the graph
    is exact (tol.rel 0). Otherwise NaN and infinity positions must match
    and finite values agree as `Tolerance` says, with SAFETY on top.
    """
    if actual.dtype != expected.dtype:
        return f"output {name}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"output {name}: shape {actual.shape}, expected {expected.shape}"
    if expected.dtype.kind not in "f":
        bad = actual != expected
        return _report(name, expected, actual, bad) if bad.any() else None
    nan_e, nan_a = np.isnan(expected), np.isnan(actual)
    if (nan_e != nan_a).any():
        return _report(name, expected, actual, nan_e != nan_a, "NaN positions differ")
    fin = np.isfinite(expected)
    inf_bad = ~fin & ~nan_e & (actual != expected)
    if inf_bad.any():
        return _report(name, expected, actual, inf_bad, "infinities differ")
    e, a = expected[fin].astype(np.float64), actual[fin].astype(np.float64)
    if tol.rel == 0.0:
        bad_f = a != e
    else:
        largest = float(np.max(np.abs(e))) if e.size else 0.0
        scale = max(largest, min(tol.bound, BOUND_CAP * max(largest, 1.0)), float(np.finfo(expected.dtype).tiny))
        bad_f = ~(np.abs(a - e) <= SAFETY * tol.rel * (np.abs(e) + scale))
    if bad_f.any():
        bad = np.zeros(expected.shape, dtype=bool)
        bad[fin] = bad_f
        return _report(name, expected, actual, bad, f"tolerance {tol.rel:.2g}")
    return None


def _report(name: str, expected: np.ndarray, actual: np.ndarray, bad: np.ndarray, what: str = "") -> str:
    where = np.argwhere(bad)
    first = tuple(int(i) for i in where[0]) if where.size else ()
    return (f"output {name}: {int(bad.sum())} of {bad.size} elements differ {what}; first at {first}: "
            f"got {actual[first]!r}, expected {expected[first]!r}").replace("  ", " ")


def compare_all(case: Case, expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> str | None:
    names = [o.name for o in case.model.graph.output]
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    problems = [p for n, e, a in zip(names, expected, actual)
                if (p := compare(n, e, a, case.tolerances.get(n, Tolerance()))) is not None]
    return "\n".join(problems) or None


def run_case(case: Case, expected: Sequence[np.ndarray]) -> Outcome:
    """tessera's outcome on a case the reference ran (crashes and hangs are the caller's to catch)."""
    try:
        actual = run_tessera(case)
    except Exception as err:  # classified, not hidden: anything but a clean refusal fails
        return classify_error(err)
    problem = compare_all(case, expected, actual)
    return Outcome(Kind.WRONG, problem) if problem else Outcome(Kind.PASSED)
