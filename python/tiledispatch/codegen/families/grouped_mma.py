"""grouped_mma (cuda, convolution, every direction): grouped convolution as an implicit GEMM on
tensor cores with run-time channel counts per group (bindings/cuda/conv_grouped_mma.cuh), the
group a grid dimension. For the channel counts the specialised families have no kernel for
(RegNet's 24..232 and ResNeXt's 32..256 channels per group, C != K); C and K multiples of 8.
Tile = the implicit GEMM's block tile (rows M: 32, 64 or 128; columns N: 32, 64 or 128; the
reduction step K: 32 or 64); four warps."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend
from .base import Fixed
from .sm90 import half_precision_problems, target_problems

TILE_M = (32, 64, 128)
TILE_N = (32, 64, 128)
TILE_K = (32, 64)


@dataclass(frozen=True)
class GroupedMma(Fixed):
    FAMILY = "grouped_mma"
    CODE = 14
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_grouped_mma.cuh"
    COST = {"conv": "grouped_mma_conv_cost"}
    COST_SOURCE = "cost/grouped_mma.cpp"
    TOKEN = "gmma"
    NO_KNOBS_WHY = " (its kernels differ by their tile: rows x columns x reduction step of the implicit GEMM)"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        out = half_precision_problems("grouped_mma convolution kernels", dtype)
        m, n, k = tile
        if m not in TILE_M or n not in TILE_N or k not in TILE_K:
            out.append(f"grouped_mma tile must be [32|64|128, 32|64|128, 32|64] (GEMM rows, columns and reduction "
                       f"step per block), not {list(tile)}")
        return out

    def instance(self, config) -> str:
        m, n, k = config.tile
        return f"cuda::Sm90GroupedMmaConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {m}, {n}, {k}>"
