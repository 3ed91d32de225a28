"""Matrix products: `nn.matmul` (NumPy semantics) and `nn.dense` (x · wᵀ).

float32 products of matrices with enough rows run as a packed-panel GEMM
microkernel sized for the target's vector registers (see `gemm`). Otherwise
`nn.matmul` runs k outside n so the innermost loop streams a row of the
right-hand matrix and of the output: contiguous, vectorisable. When the
output's last two dims divide into small tiles, a tile of rows x columns
accumulates in registers across the whole k loop (see `_tiled_matmul`). `nn.dense`
(ONNX Gemm with transB) is rewritten by the DenseToMatmul pass into
`matmul(x, transpose(w))`, which constant folding turns into a pre-transposed
weight at compile time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ... import te
from ...errors import TypeInferenceError
from ...relay.ty import TensorType, Type
from ...target.simd import host_arch
from ...te.lower import LOCAL_TILE_ELEMENTS
from ...tir import expr as E
from .._util import as_tensor, broadcast_indices, broadcast_shapes, same_dtype
from ..registry import OpPattern, register_op
from ..schedule_context import ScheduleContext
from .gemm import gemm_product


def _matmul_type(types: tuple[Type, ...], attrs: object) -> Type:
    a, b = as_tensor(types[0], "lhs"), as_tensor(types[1], "rhs")
    dtype = same_dtype([a, b], "matmul operands")
    if a.ndim < 1 or b.ndim < 1:
        raise TypeInferenceError("matmul operands must have at least one dimension")
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise TypeInferenceError(f"inner dimensions differ: {a.shape} @ {b.shape}")
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    shape = batch + (a_shape[-2], b_shape[-1])
    if a.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if b.ndim == 1:
        shape = shape[:-1]
    return TensorType(shape, dtype)


# Register tile of the matmul kernel: TILE_ROWS x TILE_COLS outputs (a few
# rows of A against two AVX vectors of B) accumulate in registers.
TILE_ROWS = (6, 4, 3, 2)
TILE_COLS = (16, 8)


MIN_TILED_ROWS = 8  # fewer rows would not pay for regrouping B into panels


# what the tuner may try instead (see tessera.tune); at most LOCAL_TILE_ELEMENTS per tile
ROW_CANDIDATES = (8, 6, 4, 3, 2)
COL_CANDIDATES = (32, 16, 8)


def _tile(out_shape: tuple[int, ...], k: int, sched: ScheduleContext) -> tuple[int, int] | None:
    """The register tile (rows, cols): the tuned choice for this workload, or the default."""
    *batch, m, n = out_shape
    if m < MIN_TILED_ROWS:
        return None
    rows = next((r for r in TILE_ROWS if m % r == 0), None)
    cols = next((c for c in TILE_COLS if n % c == 0), None)
    if not (rows and cols):
        return None
    candidates = [{"rows": r, "cols": c} for r in ROW_CANDIDATES if m % r == 0
                  for c in COL_CANDIDATES if n % c == 0 and r * c <= LOCAL_TILE_ELEMENTS]
    picked = sched.choose("matmul", {"batch": batch, "m": m, "n": n, "k": k}, candidates, {"rows": rows, "cols": cols},
                          work=int(np.prod(out_shape)) * k)
    return picked["rows"], picked["cols"]


def _operand_indices(batch: Sequence[E.PrimExpr], shape: tuple[int, ...], tail: Sequence[E.PrimExpr]
                     ) -> tuple[E.PrimExpr, ...]:
    return (*broadcast_indices(batch, shape[:-2]), *tail)


def _panels(b: te.Tensor, cols: int) -> te.Tensor:
    """B regrouped into column panels [..., nb, k, ni]: a tile's k loop then
    reads one contiguous panel instead of `cols` floats from each of k rows
    (rows a power-of-two apart land in the same cache set)."""
    *batch, k, n = b.shape
    shape = (*batch, n // cols, k, cols)

    def element(*i: E.Var) -> E.PrimExpr:
        *lead, nb, kk, ni = i
        return b[(*lead, kk, E.add(E.mul(nb, cols), ni))]

    return te.compute(shape, element, name="matmul_panels", materialize=True)


def _tiled_matmul(a: te.Tensor, b: te.Tensor, out: TensorType, rows: int, cols: int) -> te.Tensor:
    """t[*batch, mb, mi, nb, ni] (the row-major layout of the output) with the
    reduction outside the (mi, ni) tile loops: a register-blocked micro-kernel."""
    *batch_shape, m, n = out.shape
    rk = te.reduce_axis(a.shape[-1], "rk")
    nbatch = len(batch_shape)
    batch_names = [f"b{k}" for k in range(nbatch)]
    panels = _panels(b, cols)

    def element(*i: E.Var) -> E.PrimExpr:
        batch, (mb, mi, nb, ni) = list(i[:nbatch]), i[nbatch:]
        row = E.add(E.mul(mb, rows), mi)
        lhs = a[_operand_indices(batch, a.shape, [row, rk.var])]
        rhs = panels[(*broadcast_indices(batch, b.shape[:-2]), nb, rk.var, ni)]
        return te.sum(E.mul(lhs, rhs), rk)

    shape = (*batch_shape, m // rows, rows, n // cols, cols)
    names = [*batch_names, "mb", "mi", "nb", "ni"]
    tiles = te.compute(shape, element, name="matmul", axis_names=names,
                       loop_order=[*batch_names, "nb", "mb", "rk", "mi", "ni"], register_tile=True)

    def untile(*i: E.Var) -> E.PrimExpr:
        *batch, row, col = i
        return tiles[(*batch, E.floordiv(row, rows), E.floormod(row, rows), E.floordiv(col, cols),
                      E.floormod(col, cols))]

    return te.compute(out.shape, untile, name="matmul_out")


def _matmul_compute(inputs: list[te.Tensor], attrs: object, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    a, b = inputs
    packed = gemm_product(a, b, out, sched)
    if packed is not None:
        return packed
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    tile = None if a_vec or b_vec else _tile(tuple(out.shape), a.shape[-1], sched)
    if tile is not None:
        return _tiled_matmul(a, b, out, *tile)
    k_extent = a.shape[-1]
    rk = te.reduce_axis(k_extent, "rk")
    nd = len(out.shape)
    names = [f"b{k}" for k in range(nd)]

    def element(*i: E.Var) -> E.PrimExpr:
        batch = i[: nd - (0 if a_vec else 1) - (0 if b_vec else 1)]
        a_idx: tuple[E.PrimExpr, ...] = (rk.var,)  # a vector: [k]; a matrix: [*batch, m, k]
        if not a_vec:
            a_idx = _operand_indices(batch, a.shape, [i[nd - (1 if b_vec else 2)], rk.var])
        b_idx: tuple[E.PrimExpr, ...] = (rk.var,)  # a vector: [k]; a matrix: [*batch, k, n]
        if not b_vec:
            b_idx = _operand_indices(batch, b.shape, [rk.var, i[-1]])
        return te.sum(E.mul(a[a_idx], b[b_idx]), rk)

    if b_vec:
        order = names + ["rk"]
    else:
        order = names[:-1] + ["rk", names[-1]]
    # a product on one row streams its weight: in parts on the threads of a host (no stack to spare on an MCU)
    return te.compute(out.shape, element, name="matmul", axis_names=names, loop_order=order,
                      row_parts=host_arch(sched.target) is not None)


def _matmul_ref(args: list[np.ndarray], attrs: object) -> np.ndarray:
    return np.matmul(args[0], args[1])


matmul = register_op(
    "nn.matmul", type_rel=_matmul_type, reference=_matmul_ref, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    compute=_matmul_compute, num_inputs=2, doc="NumPy matmul, with batch broadcasting.",
)


def _dense_type(types: tuple[Type, ...], attrs: object) -> Type:
    x, w = as_tensor(types[0], "data"), as_tensor(types[1], "weight")
    dtype = same_dtype([x, w], "data and weight")
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise TypeInferenceError(f"dense needs data (M, K) and weight (N, K), got {x.shape} and {w.shape}")
    return TensorType((x.shape[0], w.shape[0]), dtype)


def _dense_compute(inputs: list[te.Tensor], attrs: object, out: TensorType, sched: ScheduleContext) -> te.Tensor:
    x, w = inputs
    packed = gemm_product(x, w, out, sched, transpose_b=True)  # w's transpose folds into B's packing
    if packed is not None:
        return packed
    rk = te.reduce_axis(x.shape[1], "rk")
    return te.compute(out.shape, lambda m, n: te.sum(E.mul(x[m, rk.var], w[n, rk.var]), rk), name="dense",
                      axis_names=["m", "n"])


dense = register_op(
    "nn.dense", type_rel=_dense_type, reference=lambda args, a: args[0] @ args[1].T,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE, compute=_dense_compute, num_inputs=2,
    doc="x (M, K) times weight (N, K) transposed.",
)
