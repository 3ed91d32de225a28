"""An output stage: a last step, run by an external module, whose outputs have data-dependent shapes.

tessera's kernels have static shapes; an operator such as ONNX `NonZero`
does not (how many elements are non-zero is known only at run time), and
neither does anything computed from its result. Such a tail of the graph
runs after the compiled graph, in an external module (onnxruntime) that
returns arrays of any shape (`ExternalModule.run_dynamic`).

The compiled graph then returns the model's static outputs and the values
the tail reads; the stage picks each final output from one or the other:

    stage = OutputStage("tail", inputs=(1,), outputs=(("graph", 0), ("stage", 0)))
    # final outputs: graph output 0, then output 0 of tail(graph output 1)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ArtifactError

if TYPE_CHECKING:
    from .external import ExternalModule

DynamicFunction = Callable[[Sequence[np.ndarray]], list[np.ndarray]]

SOURCES = ("graph", "stage")  # where a final output comes from


@dataclass(frozen=True, slots=True)
class OutputStage:
    function: str  # the external module's function that runs the tail
    inputs: tuple[int, ...]  # the compiled graph's outputs the tail reads, in order
    outputs: tuple[tuple[str, int], ...]  # each final output: (source, index in that source)

    def __post_init__(self) -> None:
        for source, _ in self.outputs:
            if source not in SOURCES:
                raise ValueError(f"output source {source!r} is not one of {SOURCES}")

    def apply(self, graph_outputs: Sequence[np.ndarray], run: DynamicFunction) -> list[np.ndarray]:
        staged = run([graph_outputs[k] for k in self.inputs])
        return [np.asarray(graph_outputs[k] if source == "graph" else staged[k]) for source, k in self.outputs]

    def to_bytes(self) -> bytes:
        return json.dumps({"function": self.function, "inputs": list(self.inputs),
                           "outputs": [list(o) for o in self.outputs]}).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "OutputStage":
        try:
            raw = json.loads(data)
            return cls(str(raw["function"]), tuple(int(k) for k in raw["inputs"]),
                       tuple((str(s), int(k)) for s, k in raw["outputs"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ArtifactError(f"{where}: the output stage cannot be read ({type(exc).__name__}: {exc})") from None

    def check(self, graph_outputs: int, where: str) -> None:
        """Indices in range of a graph with `graph_outputs` outputs (a loaded stage is checked before use)."""
        bad = [k for k in self.inputs if not 0 <= k < graph_outputs]
        bad += [k for source, k in self.outputs if source == "graph" and not 0 <= k < graph_outputs]
        if bad:
            raise ArtifactError(f"{where}: the output stage reads graph outputs {bad}, the graph has {graph_outputs}")


@dataclass(frozen=True, slots=True)
class DynamicTail:
    """What an importer hands to the build: the module that runs the tail, and the stage."""

    module: ExternalModule
    stage: OutputStage

    def __repr__(self) -> str:  # (printed with the function's attributes)
        return f"DynamicTail({self.stage.function}, {len(self.stage.outputs)} outputs)"


DYNAMIC_TAIL_ATTR = "dynamic_tail"  # FuncAttrs.extra key of `main`: a DynamicTail

__all__ = ["DYNAMIC_TAIL_ATTR", "DynamicTail", "OutputStage"]
