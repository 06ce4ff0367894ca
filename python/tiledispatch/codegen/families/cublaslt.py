"""cublaslt (cuda, GEMM): cuBLASLt's matmul as a kernel of the registry
(bindings/cuda/gemm_cublaslt.cuh): fp16 and bf16 in every layout, fp8 e4m3 in rcr (cuBLASLt's
fp8 needs that layout; it has no e5m2 x e5m2 kernel). Selection weighs it against our GEMMs.
Built where cuBLASLt's headers are found (the CUDA toolkit, the nvidia-cublas wheel,
CUBLAS_ROOT); the library is opened at run time."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, DType, GemmVariant, Layout
from .vendor import Vendor


@dataclass(frozen=True)
class CublasLt(Vendor):
    FAMILY = "cublaslt"
    CODE = 13
    BACKEND = Backend.CUDA
    OPS = ("gemm",)
    HEADER = "cuda/gemm_cublaslt.cuh"
    COST = {"gemm": "cublaslt_gemm_cost"}
    COST_SOURCE = "cost/cublaslt.cpp"
    TOKEN = "cublaslt"
    VENDOR_LIBRARY = "cublaslt"

    def vendor_problems(self, op, dtype, layout, variant) -> list[str]:
        out = []
        if dtype not in (DType.FP16, DType.BF16, DType.FP8_E4M3):
            out.append(f"the cublaslt family takes fp16, bf16 or fp8_e4m3, not {dtype.key}")
        if dtype is DType.FP8_E4M3 and layout is not Layout.RCR:
            out.append("cuBLASLt's fp8 matmul takes layout rcr only")
        if variant is not GemmVariant.STANDARD:
            out.append("the cublaslt family is variant standard (cuBLASLt splits K itself)")
        return out

    def instance(self, config) -> str:
        return f"cuda::CublasLtGemm<{config.dtype.code}, {config.layout.code}>"
