"""torch tensors as the kernels read them: numpy views of CPU tensors (no copy), torch's
channels-first shapes permuted onto the channels-last-with-groups layout, and the element
types torch and the library share."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from .codegen import DType

# torch element type -> the library's
DTYPES = {torch.float32: DType.FP32, torch.float16: DType.FP16, torch.bfloat16: DType.BF16,
          torch.float8_e4m3fn: DType.FP8_E4M3, torch.float8_e5m2: DType.FP8_E5M2}
TORCH_DTYPES = {value: key for key, value in DTYPES.items()}

# element types numpy has no name for: read through an integer view of the same width
_BIT_VIEWS = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
              torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
              torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2)}


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    """The torch element type a kernel writes for inputs of `dtype` (fp8 inputs: bfloat16)."""
    found = DTYPES.get(dtype)
    return TORCH_DTYPES[found.out] if found is not None else dtype


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A numpy array over a CPU tensor's memory, strides kept (no copy); bfloat16 and float8
    through an integer view of the same width and the ml_dtypes type."""
    tensor = tensor.detach()
    view = _BIT_VIEWS.get(tensor.dtype)
    if view is None:
        return tensor.numpy()
    bits, numpy_type = view
    return tensor.view(bits).numpy().view(numpy_type)


def channels_last(tensor: torch.Tensor) -> torch.Tensor:
    """(N, C, *spatial) -> the view (N, *spatial, C); a weight (G*K, C, *filter) likewise ->
    (G*K, *filter, C). A tensor in torch's channels_last memory format becomes contiguous."""
    return tensor.permute(0, *range(2, tensor.dim()), 1)


def channels_first(tensor: torch.Tensor) -> torch.Tensor:
    """(N, *spatial, C) -> the view (N, C, *spatial): the inverse of channels_last."""
    return tensor.permute(0, tensor.dim() - 1, *range(1, tensor.dim() - 1))


def empty_channels_last(shape_first, dtype: torch.dtype, device) -> torch.Tensor:
    """A new tensor of the channels-first shape (N, C, *spatial) stored channels-last
    (contiguous as (N, *spatial, C)): the output layout of the conv ops."""
    n, c, *spatial = shape_first
    return channels_first(torch.empty((n, *spatial, c), dtype=dtype, device=device))


def dense_channels_last(tensor: torch.Tensor) -> torch.Tensor:
    """The contiguous channels-last view of a channels-first tensor, copied only where its
    memory is laid out otherwise."""
    return channels_last(tensor).contiguous()
