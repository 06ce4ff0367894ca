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


def ld_in_order(matrix: np.ndarray, order: str):
    """The leading dimension (elements) of a matrix read in row ('r') or column ('c') order,
    or None where its strides do not allow that order. A dimension of size 1 has any stride:
    a (rows x 1) matrix is column-major with ld = rows whatever its row stride."""
    item = matrix.itemsize
    rows, cols = matrix.shape
    s0, s1 = matrix.strides
    if order == "c":  # read the transpose in row order
        rows, cols, s0, s1 = cols, rows, s1, s0
    if cols > 1 and s1 != item:
        return None
    if rows == 1:
        return max(cols, 1)
    if s0 <= 0 or s0 % item or s0 // item < cols:
        return None
    return s0 // item


def pointer(array) -> int:
    return array.__array_interface__["data"][0]


def random(shape, dtype: DType, rng: np.random.Generator, low=-1.0, high=1.0) -> np.ndarray:
    """Uniform random values, quantized to dtype."""
    values = rng.random(size=shape, dtype=np.float32) * np.float32(high - low) + np.float32(low)
    return values.astype(numpy_dtype(dtype))


# ---- device arrays (torch, cupy, numba): none of them a dependency -------------------------

_TORCH_DTYPES = {"torch.float32": DType.FP32, "torch.float16": DType.FP16, "torch.bfloat16": DType.BF16,
                 "torch.float8_e4m3fn": DType.FP8_E4M3, "torch.float8_e5m2": DType.FP8_E5M2}
_TYPESTR = {"<f4": DType.FP32, "<f2": DType.FP16}
_TORCH_NAMES = {d: name.split(".")[1] for name, d in _TORCH_DTYPES.items()}


def torch_dtype(dtype: DType):
    """The torch element type of a DType (imports torch: call it only with torch in use)."""
    import torch
    return getattr(torch, _TORCH_NAMES[dtype])


class DeviceArray:
    """A CUDA array of torch, cupy or numba seen through one interface: address, shape,
    strides in elements, element type, the caller's current stream, and a way to make an
    output of the same kind."""

    def __init__(self, obj):
        self.obj = obj
        if is_torch(obj):
            self.kind = "torch"
            self.ptr = obj.data_ptr()
            self.shape = tuple(obj.shape)
            self.strides = tuple(obj.stride())
            name = str(obj.dtype)
            if name not in _TORCH_DTYPES:
                raise TypeError(f"unsupported element type {name}")
            self.dtype = _TORCH_DTYPES[name]
        else:
            cai = obj.__cuda_array_interface__
            self.kind = type(obj).__module__.split(".")[0]
            self.ptr = cai["data"][0]
            self.shape = tuple(cai["shape"])
            if cai["typestr"] not in _TYPESTR:
                raise TypeError(f"unsupported element type {cai['typestr']} (through __cuda_array_interface__; "
                                "pass torch tensors for bf16 and fp8)")
            self.dtype = _TYPESTR[cai["typestr"]]
            item = self.dtype.nbytes
            strides = cai.get("strides")
            if strides is None:  # C-contiguous
                strides, acc = [], 1
                for size in reversed(self.shape):
                    strides.insert(0, acc)
                    acc *= size
                self.strides = tuple(strides)
            else:
                self.strides = tuple(s // item for s in strides)

    def stream(self) -> int:
        """The caller's current stream on this array's device (0: the legacy default)."""
        if self.kind == "torch":
            import torch  # already imported by the caller
            return torch.cuda.current_stream(self.obj.device).cuda_stream
        if self.kind == "cupy":
            import cupy
            return cupy.cuda.get_current_stream().ptr
        if self.kind == "numba":
            return 0
        return 0

    def empty(self, shape, dtype: DType):
        """A new C-contiguous array of the caller's kind on the same device."""
        if self.kind == "torch":
            import torch
            return torch.empty(shape, dtype=torch_dtype(dtype), device=self.obj.device)
        if self.kind == "cupy":
            import cupy
            if dtype not in (DType.FP32, DType.FP16):
                raise TypeError(f"cupy has no {dtype.key} arrays: pass out=")
            return cupy.empty(shape, dtype=dtype.numpy_name)
        if self.kind == "numba":
            from numba import cuda
            if dtype not in (DType.FP32, DType.FP16):
                raise TypeError(f"numba has no {dtype.key} arrays: pass out=")
            return cuda.device_array(shape, dtype=dtype.numpy_name)
        raise TypeError(f"cannot allocate an output like a {type(self.obj).__name__}: pass out=")

    def byte_range(self) -> tuple:
        """[first, end) device addresses the array's elements cover, strides included."""
        item = self.dtype.nbytes
        if 0 in self.shape:
            return self.ptr, self.ptr
        low = sum(min(0, (n - 1) * s) for n, s in zip(self.shape, self.strides)) * item
        high = sum(max(0, (n - 1) * s) for n, s in zip(self.shape, self.strides)) * item + item
        return self.ptr + low, self.ptr + high

    def overlaps(self, other: "DeviceArray") -> bool:
        """True where the two arrays' address ranges intersect (a conservative test: two
        interleaved views of one buffer count as overlapping)."""
        a0, a1 = self.byte_range()
        b0, b1 = other.byte_range()
        return a0 < b1 and b0 < a1

    def matrix_order(self):
        """('r', ld), ('c', ld) or None, as matrix_order() for host arrays."""
        if len(self.shape) != 2:
            raise ValueError(f"expected a matrix, got shape {self.shape}")
        rows, cols = self.shape
        s0, s1 = self.strides
        if (s1 == 1 or cols == 1) and s0 >= max(cols, 1) and s0 > 0:
            return "r", s0
        if (s0 == 1 or rows == 1) and s1 >= max(rows, 1) and s1 > 0:
            return "c", s1
        return None


def is_torch(obj) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def is_device_array(obj) -> bool:
    """True for CUDA tensors/arrays of torch, cupy, numba (or anything with
    __cuda_array_interface__)."""
    if is_torch(obj):
        return bool(getattr(obj, "is_cuda", False))
    return hasattr(obj, "__cuda_array_interface__")
