"""Random valid ONNX graphs, and a harness that compares tessera with onnxruntime.

`generate.generate_case(chooser)` builds a graph of a few nodes over the
operators tessera claims, with input data, from a `Chooser`: hypothesis in
the tests (so failures shrink), a seeded `random.Random` in
`scripts/fuzz.py`. Every value carries what the generator knows about it
(bounds, finiteness, accumulated rounding error), so operators are only
applied inside their defined domain and results compare with tolerances that
follow from the graph. `check.run_case` classifies one case; `pool` runs
cases in worker processes so a crash or a hang is caught and counted.
"""
