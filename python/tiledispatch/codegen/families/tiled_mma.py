"""tiled_mma (cuda, convolution, every direction): tensor-core grouped convolution from
shared-memory tiles (bindings/cuda/conv_mma_tiled.cuh). Tile = (output pixels per block, 16 or
32 channels per block, 16 = the MMA's K)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend
from .base import PerGroup
from .sm90 import half_precision_problems, target_problems


@dataclass(frozen=True)
class TiledMma(PerGroup):
    channels_per_group: int = 16

    FAMILY = "tiled_mma"
    CODE = 9
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_mma_tiled.cuh"
    COST = {"conv": "tiled_mma_conv_cost"}
    COST_SOURCE = "cost/tiled_mma.cpp"
    CPG = (1, 2, 4, 8, 16)
    CPG_LABEL = "1, 2, 4, 8, 16 (tiled_mma)"
    TOKEN = "tiledmma"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        out = half_precision_problems("tiled_mma convolution kernels", dtype)
        if tile[0] not in (64, 128, 256, 512) or tile[1] not in (16, 32) or tile[2] != 16:
            out.append(f"tiled_mma tile must be [64|128|256|512, 16|32, 16] (pixels per block, channels per block, "
                       f"MMA K), not {list(tile)}")
        return out

    def instance(self, config) -> str:
        return (f"cuda::Sm90TcConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, "
                f"{self.channels_per_group}, {config.tile[0]}, {config.tile[1]}>")
