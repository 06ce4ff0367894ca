"""depthwise_mma (cuda, convolution; one channel per group, 2D): depthwise on tensor cores
(bindings/cuda/conv_depthwise_mma.cuh): a Toeplitz matrix of each filter row as the MMA's B
(fwd, bwd_data), a Hankel matrix of each input row as its B (bwd_weight). Tile = (output
rows, output columns, channels per block); for bwd_weight (input rows a step, output columns
of a strip, channels per block)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, Direction
from .base import Fixed
from .sm90 import half_precision_problems, target_problems


def wgrad_ring_bytes(tile) -> int:
    """Shared memory of the depthwise bwd_weight kernel's rings (DwWgradRing in
    bindings/cuda/conv_depthwise_mma.cuh: 3 x slots and 8 / rows + 3 dy slots, each aligned
    to 8 pixels; 2 steps ahead)."""
    rows, cols, chans = tile
    pixel = 2 * chans
    align = 8 * pixel

    def slot(width):
        return (rows * width * pixel + align - 1) // align * align
    return 3 * slot(cols + 7) + (8 // rows + 3) * slot(cols + 1) + 24


def toeplitz_problems(name: str, dtype, direction, tile, layout) -> list[str]:
    """The Toeplitz tensor-core kernels' rules (depthwise_mma and toeplitz_mma): tile = (16 or
    32 output rows, 16, 32 or 64 output columns, 8, 16, 32 or 64 channels per block); 2D;
    depthwise_mma every direction, toeplitz_mma fwd and bwd_data."""
    out = []
    out += half_precision_problems(f"{name} convolution kernels", dtype)
    if layout is not None and layout.ndim != 2:
        out.append(f"the {name} kernels take the 2D layout only")
    if direction is Direction.BWD_WEIGHT and name == "toeplitz_mma":
        out.append(f"the {name} kernels compute fwd and bwd_data (bwd_weight: algorithm depthwise or tiled_mma)")
    if direction is Direction.BWD_WEIGHT:
        if tile[0] not in (4, 8) or tile[1] not in (16, 32, 64) or tile[2] not in (16, 32, 64):
            out.append(f"{name} bwd_weight tile must be [4|8 input rows a step, 16|32|64 columns, "
                       f"16|32|64 channels], not {list(tile)}")
        elif wgrad_ring_bytes(tile) > 227 * 1024:
            out.append(f"{name} bwd_weight tile {list(tile)}: its TMA rings need "
                       f"{wgrad_ring_bytes(tile) / 1024:.0f} KB of shared memory, more than 227 KB")
    elif tile[0] not in (16, 32) or tile[1] not in (16, 32, 64) or tile[2] not in (8, 16, 32, 64):
        out.append(f"{name} tile must be [16|32 rows, 16|32|64 columns, 8|16|32|64 channels], "
                   f"not {list(tile)}")
    return out


@dataclass(frozen=True)
class DepthwiseMma(Fixed):
    FAMILY = "depthwise_mma"
    CODE = 6
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_depthwise_mma.cuh"
    COST = {"conv": "depthwise_mma_conv_cost"}
    COST_SOURCE = "cost/depthwise_mma.cpp"
    TOKEN = "dwmma"
    NO_KNOBS_WHY = " (it is one channel per group by definition)"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        return target_problems(target) or toeplitz_problems(self.FAMILY, dtype, variant, tile, layout)

    def instance(self, config) -> str:
        rows, cols, chans = config.tile
        return f"cuda::Sm90DwMmaConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {rows}, {cols}, {chans}>"

    def info(self, config) -> dict:
        return {"channels_per_group": 1}
