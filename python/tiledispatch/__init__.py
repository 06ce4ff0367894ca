"""tiledispatch: declarative GEMM / grouped-convolution kernels and a runtime dispatcher.

    import tiledispatch as td
    c = td.gemm(a, b)                 # numpy arrays; bf16 / fp8 through ml_dtypes
    y = td.conv(x, w, padding=1, groups=32)
    d = td.Dispatcher("gemm")         # .kernels, .select(problem), .run(...)
"""
from . import codegen
from ._registry import registry
from .api import conv, gemm
from .codegen import (
    ConvKernelConfig, ConvLayout, CpuKnobs, Direction, DType, GemmKernelConfig, GemmVariant,
    Layout, Reduction,
)
from .dispatcher import Dispatcher
from .errors import (
    InvalidArgumentError, KernelRejectedError, TileDispatchError, UnsupportedProblemError,
)
from .problems import ConvProblem, GemmProblem

__version__ = "0.1.0"

__all__ = [
    "ConvKernelConfig", "ConvLayout", "ConvProblem", "CpuKnobs", "DType", "Direction",
    "Dispatcher", "GemmKernelConfig", "GemmProblem", "GemmVariant", "InvalidArgumentError",
    "KernelRejectedError", "Layout", "Reduction", "TileDispatchError", "UnsupportedProblemError",
    "codegen", "conv", "gemm", "registry",
]
