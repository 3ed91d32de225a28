#!/usr/bin/env python3
"""Fuzz tessera against onnxruntime with random valid ONNX graphs.

    scripts/fuzz.py --cases 5000 --jobs 2 [--seed 0] [--out fuzz-failures]
    scripts/fuzz.py --replay fuzz-failures/case-000123

Runs --cases valid graphs (graphs the reference rejects are generated
again and not counted), each in a worker process with a timeout, prints a
summary per kind of failure and ends with the line "N passed, N failed".
Every failing case is saved (model.onnx, inputs.npz, info.json) under
--out. Values outside ONNX's defined behaviour (out-of-range indices, integer
division by zero) are avoided unless --allow names them.
The exit status is 1 if any case failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tessera.testing.fuzz.check import FAILURES, Kind, reference, run_case  # noqa: E402
from tessera.testing.fuzz.generate import DEFAULT_AVOID, KNOWN_BUGS, case_summary  # noqa: E402
from tessera.testing.fuzz.pool import Result, WorkerPool, case_seed, default_jobs, make_case  # noqa: E402
from tessera.testing.fuzz.store import load_case, save_case  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200, help="valid cases to run (default 200)")
    p.add_argument("--seed", type=int, default=0, help="run seed; case i is generated from 'seed:i'")
    p.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes (default: up to 2)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case before it counts as a hang")
    p.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="folder for failing cases")
    p.add_argument("--allow", action="append", default=[], choices=sorted(KNOWN_BUGS),
                   help="generate graphs that may hit this hazard (repeatable; see docs/fuzzing.md)")
    p.add_argument("--replay", type=Path, help="rerun one saved case in this process and print the outcome")
    args = p.parse_args(argv)
    if args.cases < 1 or args.jobs < 1 or args.timeout <= 0:
        p.error("--cases and --jobs must be >= 1 and --timeout > 0")
    return args


def replay(folder: Path) -> int:
    case = load_case(folder)
    print(case_summary(case))
    outcome = run_case(case, reference(case))
    print(f"{outcome.kind.value}: {outcome.detail}")
    return 1 if outcome.failed else 0


class Tally:
    def __init__(self, args: argparse.Namespace, avoid: frozenset[str]) -> None:
        self.args, self.avoid = args, avoid
        self.kinds: collections.Counter[Kind] = collections.Counter()
        self.groups: dict[tuple[Kind, str], list[Result]] = collections.defaultdict(list)
        self.known: collections.Counter[str] = collections.Counter()
        self.invalid: collections.Counter[str] = collections.Counter()
        self.samples: dict[str, str] = {}  # one reason per kind of rejection
        self.ops: collections.Counter[str] = collections.Counter()
        self.valid = 0

    def add(self, r: Result) -> None:
        if r.outcome is None:
            category = r.reason.split(":")[0]
            self.invalid[category] += 1
            self.samples.setdefault(category, f"case {r.index}: {r.reason.splitlines()[0][:200]}")
            return
        self.valid += 1
        self.kinds[r.outcome.kind] += 1
        self.ops.update(t.split(":")[0] for t in r.ops)
        if not r.outcome.failed:
            return
        for hazard in r.hazards:
            self.known[hazard] += 1
        self.groups[(r.outcome.kind, r.outcome.signature)].append(r)
        self._save(r)

    def _save(self, r: Result) -> None:
        case = make_case(self.args.seed, r.index, self.avoid)
        folder = self.args.out / f"case-{self.args.seed}-{r.index:06d}"
        assert r.outcome is not None
        save_case(case, folder, r.outcome, {"seed": case_seed(self.args.seed, r.index),
                                            "replay": f"scripts/fuzz.py --replay {folder}"})

    @property
    def failed(self) -> int:
        return sum(self.kinds[k] for k in FAILURES)

    def report(self, seconds: float) -> None:
        a = self.args
        print(f"\nfuzz: {self.valid} cases, seed {a.seed}, {a.jobs} jobs, {seconds:.0f} s "
              f"({seconds / max(self.valid, 1):.2f} s per case); {sum(self.invalid.values())} graphs were "
              "not counted (rejected)")
        print(f"avoided hazards: {', '.join(sorted(self.avoid)) or 'none'}")
        print(f"refused as unsupported (a clean UnsupportedOperatorError, counted as passed): "
              f"{self.kinds[Kind.REFUSED]}")
        for kind in FAILURES:
            groups = {sig: idx for (k, sig), idx in self.groups.items() if k == kind}
            print(f"{kind.value}: {self.kinds[kind]}")
            for sig, results in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                print(f"  {len(results):4d} x {sig}")
                for r in results[:3]:
                    print(f"         case {r.index}: {' -> '.join(r.ops)}")
        if self.known:
            print("failures in graphs that may hit a known bug: "
                  + ", ".join(f"{k} {n}" for k, n in sorted(self.known.items())))
        if self.invalid:
            print("not counted (the generator or the reference rejected the graph):")
            for category, n in self.invalid.most_common():
                print(f"  {n:4d} x {category}, e.g. {self.samples[category]}")
        print(f"operators exercised: {len(self.ops)}; least used: "
              + ", ".join(f"{op} {n}" for op, n in sorted(self.ops.items(), key=lambda kv: kv[1])[:6]))
        if self.failed:
            print(f"failing cases saved under {a.out}/ (replay one with scripts/fuzz.py --replay FOLDER)")
        print(f"{self.valid - self.failed} passed, {self.failed} failed")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replay:
        return replay(args.replay)
    os.environ.setdefault("TESSERA_WERROR", "1")  # generated C must compile warning-free, as in the tests
    avoid = DEFAULT_AVOID - frozenset(args.allow)
    tally = Tally(args, avoid)
    counter = iter(range(10**9))
    started = time.perf_counter()
    pool = WorkerPool(args.jobs, args.seed, avoid, args.timeout)

    def next_index() -> int | None:
        busy = sum(s.index is not None for s in pool.slots)
        return None if tally.valid + busy >= args.cases else next(counter)

    try:
        for result in pool.run(next_index):
            tally.add(result)
            if result.outcome is not None and (tally.valid % 100 == 0 or result.outcome.failed):
                note = f" {result.outcome.kind.value} (case {result.index})" if result.outcome.failed else ""
                print(f"[{time.perf_counter() - started:6.0f} s] {tally.valid}/{args.cases} cases, "
                      f"{tally.failed} failed{note}", flush=True)
    finally:
        pool.close()
    tally.report(time.perf_counter() - started)
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
