"""The AOT executor: the model's schedule as a generated C function.

`plan.py` turns the lowered `main` into steps and tensors with lifetimes,
`executor.py` writes the top-level TIR function that calls each kernel,
`interface.py` the firmware-facing header and entry points, and
`library.py` packages everything (Model Library Format, host and board runs).
"""
