"""tiledispatch: declarative GEMM / grouped-convolution kernels and a runtime dispatcher.

    import tiledispatch as td
    c = td.gemm(a, b)                 # numpy arrays; bf16 / fp8 through ml_dtypes
    y = td.conv(x, w, padding=1, groups=32)
    d = td.Dispatcher("gemm")         # .kernels, .select(problem), .run(...)

The public names load on first use, so `tiledispatch.codegen` (the generator Meson runs at
build time, which needs only pyyaml) imports without the runtime's numpy and ctypes layer.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the submodule that defines it
_EXPORTS = {
    "registry": "_registry",
    "conv": "api", "gemm": "api",
    "Dispatcher": "dispatcher",
    "ConvProblem": "problems", "GemmProblem": "problems",
    "InvalidArgumentError": "errors", "KernelRejectedError": "errors", "TileDispatchError": "errors",
    "UnsupportedProblemError": "errors",
    "ConvKernelConfig": "codegen", "ConvLayout": "codegen", "CpuKnobs": "codegen", "DType": "codegen",
    "Direction": "codegen", "GemmKernelConfig": "codegen", "GemmVariant": "codegen", "Layout": "codegen",
    "Reduction": "codegen",
    "options": "_options", "set_options": "_options",
    "autotune": "_autotune", "autotune_stats": "_autotune",
    "grouped_gemm": "gemm_ex", "grouped_gemm_select": "grouped_device",
}

__all__ = sorted(_EXPORTS) + ["codegen"]


def __getattr__(name: str):
    if name == "codegen":
        return importlib.import_module(".codegen", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tiledispatch' has no attribute '{name}'")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
