"""The C identifiers of an AOT model's inputs and outputs.

A tensor keeps its real name in metadata.json and in error messages; in C it
is a field of the header's structs and a parameter of the executor function,
under one identifier chosen here, so the header, the entry points and the
executor agree. Identifiers are unique ignoring case, because the header's
macros spell them in capitals (`TSGEN_<MODEL>_INPUT_<FIELD>_SIZE`), and they
keep clear of the pools' fields and macros (`TSGEN_<MODEL>_<POOL>_SIZE`).
"""

from __future__ import annotations

from ...codegen.names import Namespace
from .plan import AotProgram, Tensor

# Fields of `struct tsgen_<model>_pools` and executor parameters that are not pools.
FIXED_FIELDS = ("params", "workspace")
_MACRO_GROUPS = ("input_", "output_")


def tensor_fields(program: AotProgram) -> dict[Tensor, str]:
    """Input and output tensor -> its C identifier, in the program's order."""
    reserved = [*FIXED_FIELDS, *program.kernels]
    for pool in program.pools:
        reserved.append(pool.name)
        # a pool `input_x` has the macro TSGEN_M_INPUT_X_SIZE, which an input `x` would have too
        reserved += [pool.name[len(g):] for g in _MACRO_GROUPS if pool.name.lower().startswith(g)]
    ns = Namespace(reserved, fold_case=True)
    tensors = [*program.inputs, *program.outputs]
    return dict(zip(tensors, ns.assign([t.name for t in tensors])))
