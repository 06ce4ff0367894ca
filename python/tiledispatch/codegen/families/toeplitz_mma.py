"""toeplitz_mma (cuda, convolution, 2 or 4 channels per group, fwd and bwd_data, 2D): the
depthwise_mma kernels for grouped convolution (bindings/cuda/conv_depthwise_mma.cuh): each
output channel sums the Toeplitz products of its group's inputs. Tile as depthwise_mma's."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend
from .base import PerGroup
from .depthwise_mma import toeplitz_problems
from .sm90 import target_problems


@dataclass(frozen=True)
class ToeplitzMma(PerGroup):
    channels_per_group: int = 2

    FAMILY = "toeplitz_mma"
    CODE = 7
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_depthwise_mma.cuh"
    COST = {"conv": "toeplitz_mma_conv_cost"}
    COST_SOURCE = "cost/toeplitz_mma.cpp"
    CPG = (2, 4)
    CPG_LABEL = "2, 4 (toeplitz_mma)"
    TOKEN = "tpmma"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        return target_problems(target) or toeplitz_problems(self.FAMILY, dtype, variant, tile, layout)

    def instance(self, config) -> str:
        rows, cols, chans = config.tile
        return (f"cuda::Sm90DwMmaConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {rows}, {cols}, "
                f"{chans}, {self.channels_per_group}>")
