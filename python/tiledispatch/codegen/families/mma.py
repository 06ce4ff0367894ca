"""mma (cuda, convolution, fwd and bwd_data): tensor-core grouped convolution from global
memory (bindings/cuda/conv_mma.cuh). Tile = (16 x PM pixels per warp, 8 x ceil(cpg / 8)
channels per warp, 16)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, Direction
from .base import PerGroup
from .sm90 import half_precision_problems, target_problems


@dataclass(frozen=True)
class Mma(PerGroup):
    channels_per_group: int = 16

    FAMILY = "mma"
    CODE = 8
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_mma.cuh"
    COST = {"conv": "mma_conv_cost"}
    COST_SOURCE = "cost/mma.cpp"
    CPG = (2, 4, 8, 16, 32)
    CPG_LABEL = "2, 4, 8, 16, 32 (mma)"
    TOKEN = "mma"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        out = []
        cpg = self.channels_per_group
        out += half_precision_problems("mma convolution kernels", dtype)
        if variant is Direction.BWD_WEIGHT:
            out.append("the mma kernels compute fwd and bwd_data (bwd_weight: algorithm direct)")
        want = (None, 8 * ((cpg + 7) // 8), 16)
        if tile[0] not in (16, 32, 64) or tile[1:] != want[1:]:
            out.append(f"mma tile must be [16|32|64, {want[1]}, 16] for {cpg} channels per group, not {list(tile)}")
        return out

    def instance(self, config) -> str:
        return (f"cuda::Sm90MmaConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, "
                f"{self.channels_per_group}, {config.tile[0]}>")
