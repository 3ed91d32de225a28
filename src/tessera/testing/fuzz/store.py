"""Failing cases on disk: the model, its inputs and what went wrong, to reproduce."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from .check import Outcome
from .generate import Case, Tolerance


def save_case(case: Case, folder: Path, outcome: Outcome, meta: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(case.model, str(folder / "model.onnx"))
    # allow_pickle spelled out (numpy's default) so that no feed can bind to it; feeds are named "in<n>"
    np.savez(folder / "inputs.npz", allow_pickle=True, **case.feeds)
    info = {"kind": outcome.kind.value, "detail": outcome.detail, "ops": case.ops,
            "tolerances": {k: [t.rel, t.bound] for k, t in case.tolerances.items()},
            "hazards": sorted(case.hazards), "executor": case.executor, **meta}
    (folder / "info.json").write_text(json.dumps(info, indent=1) + "\n")
    return folder


def load_case(folder: Path) -> Case:
    model = onnx.load(str(folder / "model.onnx"))
    info = json.loads((folder / "info.json").read_text())
    with np.load(folder / "inputs.npz") as data:
        feeds = {vi.name: data[vi.name] for vi in model.graph.input if vi.name in data.files}
    return Case(model, feeds, {k: Tolerance(*v) for k, v in info["tolerances"].items()}, list(info["ops"]),
                set(info.get("hazards", [])), info.get("executor", "graph"))
