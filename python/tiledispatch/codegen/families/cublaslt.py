"""cublaslt (cuda, GEMM): cuBLASLt's matmul as a kernel of the registry
(bindings/cuda/gemm_cublaslt.cuh): fp16 and bf16 in every layout, fp8 e4m3 in rcr (cuBLASLt's
fp8 needs that layout; it has no e5m2 x e5m2 kernel). Selection weighs it against our GEMMs.
Built where cuBLASLt's headers are found (the CUDA toolkit, the nvidia-cublas wheel,
CUBLAS_ROOT); the library is opened at run time.

Features (KernelInfo.features): beta * C, bias along N, relu and tanh-GELU (with the GELU
input as aux), the output type and strided batches for every variant, through cuBLASLt's
epilogues and batched layouts; fp8 adds row / column scales (its outer-vector scale mode) and
block-wise scales (its 128-element and 128x128 block modes). The kernel's supports() refuses
what cuBLASLt cannot do within a bit (bias along M, erf GELU, SiLU, aux without GELU, ...)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, DType, Feature, GemmVariant, Layout
from .vendor import Vendor

# What every cublaslt variant implements, and what fp8 adds (cuBLASLt's scale modes are for
# narrow-precision inputs only).
FEATURES = (Feature.BETA, Feature.BIAS_N, Feature.ACTIVATION, Feature.AUX, Feature.OUT_DTYPE, Feature.BATCH)
FP8_FEATURES = (Feature.ROW_SCALE, Feature.COL_SCALE, Feature.BLOCK_SCALE)


def features_of(dtype: DType) -> int:
    """KernelInfo.features of a cublaslt variant of input type `dtype`."""
    chosen = FEATURES + (FP8_FEATURES if dtype is DType.FP8_E4M3 else ())
    return sum(f.code for f in chosen)


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
        return f"cuda::CublasLtGemm<{config.dtype.code}, {config.layout.code}, {features_of(config.dtype)}>"

    def info(self, config) -> dict:
        return {**super().info(config), "features": features_of(config.dtype)}
