"""skinny (cuda, GEMM rcr): our decode-shape GEMM (bindings/cuda/gemm_skinny.cuh): B's rows
streamed in 16-byte vectors straight into mma.sync fragments, split-K at run time. Its knobs
are the tile (rows of A a block, rows of B a block, k of one block step = warps x the warp
step's 32 (16-bit) or 64 (fp8) elements) and `fusion`: none (D = alpha * A * B) or generic
(beta * C, a bias along N or M, the activation, aux, row and column scales and D's type
fp32 / fp16 / bf16, all at run time in the store; name token `skinny_generic`; no batch, no
block-wise scales)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, DType, Feature, GemmVariant, Layout
from .base import Family
from .sm90 import target_problems

FUSIONS = ("none", "generic")
# KernelInfo.features of a generic variant: the epilogue bits (no batch, no block-wise scale)
GENERIC_FEATURES = sum(f.code for f in Feature if f not in (Feature.BATCH, Feature.BLOCK_SCALE))


@dataclass(frozen=True)
class Skinny(Family):
    fusion: str = "none"

    FAMILY = "skinny"
    CODE = 3
    BACKEND = Backend.CUDA
    OPS = ("gemm",)
    YAML_KEYS = ("fusion",)
    HEADER = "cuda/gemm_skinny.cuh"
    COST = {"gemm": "skinny_gemm_cost"}
    COST_SOURCE = "cost/skinny.cpp"
    TOKEN = "skinny"

    def __post_init__(self):
        if self.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {self.fusion!r} for the skinny algorithm (expected none or generic)")

    @classmethod
    def from_yaml(cls, values: dict) -> "Skinny":
        cls.reject_keys(values, " (its knobs are the tile and fusion)")
        return cls(values.get("fusion", "none"))

    @property
    def token(self) -> str:
        return self.TOKEN + ("_generic" if self.fusion == "generic" else "")

    @classmethod
    def from_token(cls, token: str):
        if token == cls.TOKEN:
            return cls()
        if token == cls.TOKEN + "_generic":
            return cls("generic")
        return None

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
        return f"cuda::SkinnyGemm<{config.dtype.code}, {tm}, {tn}, {tk}, {self.features}>"

    @property
    def features(self) -> int:
        """KernelInfo.features: the epilogue bits for a generic variant, else none."""
        return GENERIC_FEATURES if self.fusion == "generic" else 0

    def info(self, config) -> dict:
        return {"features": self.features}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "fusion": self.fusion}
