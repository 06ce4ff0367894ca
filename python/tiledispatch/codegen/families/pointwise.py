"""pointwise (cuda, dense convolution): 1x1 filters without padding, any stride, at most 64
channels read a pixel, on CUDA cores (bindings/cuda/conv_pointwise.cuh). Tile = (1 pixel a
thread, the most channels written a pixel: 32 or 64, threads a block: 128 or 256); bwd_weight
(a block's pixels staged in shared memory, at most 64 x 64 sums) is built as [1, 64, 256]."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, Direction
from .base import Fixed
from .sm90 import half_precision_problems, target_problems


@dataclass(frozen=True)
class Pointwise(Fixed):
    FAMILY = "pointwise"
    CODE = 17
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_pointwise.cuh"
    COST = {"conv": "pointwise_conv_cost"}
    COST_SOURCE = "cost/pointwise.cpp"
    TOKEN = "pw"
    NO_KNOBS_WHY = " (its tile says the channels and threads)"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        out = half_precision_problems("pointwise convolution kernels", dtype)
        pixels, chans, threads = tile
        if variant is Direction.BWD_WEIGHT:
            if list(tile) != [1, 64, 256]:
                out.append(f"the pointwise bwd_weight kernel is built as tile [1, 64, 256], not {list(tile)}")
        elif pixels != 1 or chans not in (32, 64) or threads not in (128, 256):
            out.append(f"pointwise tile must be [1, 32|64 channels written, 128|256 threads], not {list(tile)}")
        return out

    def instance(self, config) -> str:
        _, chans, threads = config.tile
        return (f"cuda::Sm90PointwiseConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {chans}, "
                f"{threads}>")
