"""Scalar data types shared by Relay, TIR and the code generators.

A dtype is spelt as NumPy spells it ("float32", "int64", "bool"); this module
is the one table that maps those names to C types, NumPy types and sizes.

float16 and bfloat16 are storage types: tensors hold them (as uint16_t bit
patterns in C), kernels compute in float32. Their NumPy types come from
ml_dtypes for bfloat16 (importing it teaches NumPy the name "bfloat16").
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import TesseraError, format_choices


@dataclass(frozen=True, slots=True)
class DTypeInfo:
    name: str
    c_type: str
    bits: int
    kind: str  # "float", "int", "uint" or "bool"
    storage_only: bool = False  # held in memory only: kernels convert to float32 to compute (float16, bfloat16)

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8)


_TABLE: dict[str, DTypeInfo] = {
    info.name: info
    for info in (
        DTypeInfo("float32", "float", 32, "float"),
        DTypeInfo("float64", "double", 64, "float"),
        DTypeInfo("float16", "uint16_t", 16, "float", storage_only=True),
        DTypeInfo("bfloat16", "uint16_t", 16, "float", storage_only=True),
        DTypeInfo("int8", "int8_t", 8, "int"),
        DTypeInfo("int16", "int16_t", 16, "int"),
        DTypeInfo("int32", "int32_t", 32, "int"),
        DTypeInfo("int64", "int64_t", 64, "int"),
        DTypeInfo("uint8", "uint8_t", 8, "uint"),
        DTypeInfo("uint16", "uint16_t", 16, "uint"),
        DTypeInfo("uint32", "uint32_t", 32, "uint"),
        DTypeInfo("uint64", "uint64_t", 64, "uint"),
        DTypeInfo("bool", "uint8_t", 8, "bool"),
    )
}

SUPPORTED_DTYPES: tuple[str, ...] = tuple(_TABLE)


def info(dtype: str) -> DTypeInfo:
    try:
        return _TABLE[dtype]
    except KeyError:
        raise TesseraError(
            f"unsupported dtype {dtype!r}; supported: {format_choices(_TABLE)}"
        ) from None


def is_supported(dtype: str) -> bool:
    return dtype in _TABLE


def is_float(dtype: str) -> bool:
    return info(dtype).kind == "float"


def is_int(dtype: str) -> bool:
    return info(dtype).kind in ("int", "uint")


def is_unsigned(dtype: str) -> bool:
    return info(dtype).kind in ("uint", "bool")


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def is_storage_only(dtype: str) -> bool:
    """float16 and bfloat16: a C kernel converts them to float32 before computing."""
    return info(dtype).storage_only


def c_type(dtype: str) -> str:
    return info(dtype).c_type


def nbytes(dtype: str) -> int:
    return info(dtype).nbytes


_NUMPY_TYPES: dict[str, type] = {"bfloat16": ml_dtypes.bfloat16}


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(_NUMPY_TYPES.get(dtype, dtype))


def from_numpy(dtype: np.dtype | type | str) -> str:
    name = np.dtype(_NUMPY_TYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype).name
    info(name)  # raises for unsupported types
    return name


def max_value(dtype: str) -> float | int:
    if is_float(dtype):
        return float("inf")
    if dtype == "bool":
        return 1
    return int(np.iinfo(dtype).max)


def min_value(dtype: str) -> float | int:
    if is_float(dtype):
        return float("-inf")
    if dtype == "bool":
        return 0
    return int(np.iinfo(dtype).min)
