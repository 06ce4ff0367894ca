"""skinny (cuda, GEMM rcr): our decode-shape GEMM (bindings/cuda/gemm_skinny.cuh): B's rows
streamed in 16-byte vectors straight into mma.sync fragments, split-K at run time. Its knobs
are the tile: (rows of A a block, rows of B a block, k of one block step = warps x the warp
step's 32 (16-bit) or 64 (fp8) elements)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, DType, GemmVariant, Layout
from .base import Fixed
from .sm90 import target_problems


@dataclass(frozen=True)
class Skinny(Fixed):
    FAMILY = "skinny"
    CODE = 3
    BACKEND = Backend.CUDA
    OPS = ("gemm",)
    HEADER = "cuda/gemm_skinny.cuh"
    COST = {"gemm": "skinny_gemm_cost"}
    COST_SOURCE = "cost/skinny.cpp"
    TOKEN = "skinny"
    NO_KNOBS_WHY = " (its knobs are the tile)"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        out = []
        tm, tn, tk = tile
        if dtype not in (DType.FP16, DType.BF16, DType.FP8_E4M3, DType.FP8_E5M2):
            out.append(f"the skinny GEMM takes fp16, bf16, fp8_e4m3 or fp8_e5m2, not {dtype.key}")
        if layout is not Layout.RCR:
            out.append("the skinny GEMM reads K-contiguous rows of A and B: layout rcr only")
        if variant is not GemmVariant.STANDARD:
            out.append("the skinny GEMM has its own split-K (run time): variant standard")
        warp_k = 64 if dtype.nbytes == 1 else 32
        if tm not in (8, 16, 32, 64) or tn not in (16, 32) or tk % warp_k or tk // warp_k not in (1, 2, 4, 8, 16):
            out.append(f"skinny tile must be [8|16|32|64, 16|32, {warp_k} x 1|2|4|8|16 warps], not {list(tile)}")
        elif (tn // 16) * (tm // 8) > 8:
            out.append(f"skinny tile {tm}x{tn} holds more than 32 accumulators a thread")
        return out

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        return f"cuda::SkinnyGemm<{config.dtype.code}, {tm}, {tn}, {tk}>"
