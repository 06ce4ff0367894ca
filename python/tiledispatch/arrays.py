"""numpy arrays ↔ the ABI: element types (bf16 and fp8 through ml_dtypes), layouts, pointers."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .codegen import DType


def numpy_dtype(dtype: DType) -> np.dtype:
    if hasattr(np, dtype.numpy_name) and dtype.numpy_name in ("float32", "float16"):
        return np.dtype(dtype.numpy_name)
    return np.dtype(getattr(ml_dtypes, dtype.numpy_name))


def dtype_of(array) -> DType:
    for member in DType:
        if array.dtype == numpy_dtype(member):
            return member
    names = ", ".join(str(numpy_dtype(m)) for m in DType)
    raise TypeError(f"unsupported element type {array.dtype} (expected one of {names})")


def matrix_order(array):
    """('r', ld) for a row-major matrix with unit column stride, ('c', ld) for column-major,
    None for anything else. ld is in elements."""
    if array.ndim != 2:
        raise ValueError(f"expected a matrix, got an array of shape {array.shape}")
    item = array.itemsize
    rows, cols = array.shape
    s0, s1 = array.strides
    if (s1 == item or cols == 1) and s0 % item == 0 and s0 // item >= cols and s0 > 0:
        return "r", s0 // item
    if (s0 == item or rows == 1) and s1 % item == 0 and s1 // item >= rows and s1 > 0:
        return "c", s1 // item
    return None


def pointer(array) -> int:
    return array.__array_interface__["data"][0]


def random(shape, dtype: DType, rng: np.random.Generator, low=-1.0, high=1.0) -> np.ndarray:
    """Uniform random values, quantized to dtype."""
    return rng.uniform(low, high, size=shape).astype(np.float32).astype(numpy_dtype(dtype))
