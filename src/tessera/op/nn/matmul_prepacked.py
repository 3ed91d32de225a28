"""`nn.matmul_prepacked`: a matrix product whose right operand, a constant, was packed at compile time.

`matmul_prepacked(a, bp, columns=n)` is `a @ B` for B (k, n) stored as
`gemm.pack_b_panels(B, nr)`: shape (ceil(n / nr), k, nr), micro-panel by
micro-panel in the order the GEMM microkernel reads it. The PackGemmWeights
pass (`tessera.transform.pack_gemm_weights`) writes it in place of
`nn.matmul(a, constant)` on targets with a microkernel, so no kernel packs
a weight on every call. `a` may have batch axes; B has none. Like
`nn.matmul`, the op takes a fused elementwise tail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...target.simd import float32_lanes
from ...tir import expr as E
from .._util import as_tensor, same_dtype
from ..registry import OpPattern, register_op
from ..schedule_context import ScheduleContext
from .gemm import MIN_ROWS, gemm_prepacked_product, unpack_b_panels


@dataclass(frozen=True)
class PrepackedMatmulAttrs:
    columns: int
    """n, B's column count: the last micro-panel is zero-padded past it."""


def _type(types: tuple[Type, ...], attrs: PrepackedMatmulAttrs) -> Type:
    a, bp = as_tensor(types[0], "lhs"), as_tensor(types[1], "packed rhs")
    dtype = same_dtype([a, bp], "matmul_prepacked operands")
    if a.ndim < 2 or bp.ndim != 3:
        raise TypeInferenceError(f"matmul_prepacked needs lhs (..., m, k) and packed rhs (panels, k, nr), "
                                 f"got {a.shape} and {bp.shape}")
    panels, k, nr = bp.shape
    if a.shape[-1] != k:
        raise TypeInferenceError(f"inner dimensions differ: lhs {a.shape} against packed rhs of k={k}")
    if not (panels - 1) * nr < attrs.columns <= panels * nr:
        raise TypeInferenceError(f"columns={attrs.columns} does not fill {panels} micro-panels of {nr}: "
                                 f"expected {(panels - 1) * nr + 1} to {panels * nr}")
    return TensorType((*a.shape[:-1], attrs.columns), dtype)


def _reference(args: list[np.ndarray], attrs: PrepackedMatmulAttrs) -> np.ndarray:
    return np.matmul(args[0], unpack_b_panels(args[1], attrs.columns))


def _compute(inputs: list[te.Tensor], attrs: PrepackedMatmulAttrs, out: TensorType,
             sched: ScheduleContext) -> te.Tensor:
    a, bp = inputs
    product = gemm_prepacked_product(a, bp, out, sched)
    if product is not None:
        return product
    if math.prod(a.shape[:-1]) < MIN_ROWS and float32_lanes(sched.target):
        return _few_rows(a, bp, out)
    # a target without the microkernel (the pass only packs for targets with one): read B through its panels
    nr = bp.shape[-1]
    rk = te.reduce_axis(a.shape[-1], "rk")

    def element(*i: E.Var) -> E.PrimExpr:
        *rows, j = i
        b = bp[E.floordiv(j, nr), rk.var, E.floormod(j, nr)]
        return te.sum(E.mul(a[(*rows, rk.var)], b), rk)

    return te.compute(out.shape, element, name="matmul")


def _few_rows(a: te.Tensor, bp: te.Tensor, out: TensorType) -> te.Tensor:
    """A product of fewer rows than the microkernel takes (a classifier's one row): per micro-panel, the
    rows' NR sums kept in a register tile while k runs down the panel, a contiguous run of memory; the
    panels are the loop the threads share. AlexNet's 9216 x 4096 layer streams 151 MB of weights."""
    nr, lead = bp.shape[-1], a.shape[:-1]
    rk = te.reduce_axis(a.shape[-1], "rk")
    rows = [f"m{d}" for d in range(len(lead))]

    def element(p: E.Var, *i: E.Var) -> E.PrimExpr:
        *row, lane = i
        return te.sum(E.mul(a[(*row, rk.var)], bp[p, rk.var, lane]), rk)

    tiles = te.compute((bp.shape[0], *lead, nr), element, name="matmul_panels", axis_names=["p", *rows, "l"],
                       loop_order=["p", *rows, "rk", "l"], register_tile=True)
    return te.compute(out.shape, lambda *i: tiles[(E.floordiv(i[-1], nr), *i[:-1], E.floormod(i[-1], nr))],
                      name="matmul")


matmul_prepacked = register_op(
    "nn.matmul_prepacked", type_rel=_type, reference=_reference, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    compute=_compute, attrs=PrepackedMatmulAttrs, num_inputs=2,
    doc="a (..., m, k) times B (k, n) given as its GEMM micro-panels (panels, k, nr), packed at compile time.",
)
