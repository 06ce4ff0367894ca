"""depthwise (cuda, convolution; one channel per group, stride 1, dilation 1, 1D and 2D):
CUDA-core kernels compiled per filter size (bindings/cuda/conv_depthwise.cuh). Tile = (output
rows 1..4, output columns 1..8, 2, 4 or 8 channels per thread). The sliding kernels (2D; 1, 2
or 4 channels per thread) walk segments of at least `rows` output rows: bwd_weight from rows 2
(rows 1 walks rows one at a time), fwd and bwd_data from rows 5 (rows 1..4: output rows per
thread)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, Direction
from .base import Fixed
from .sm90 import half_precision_problems, target_problems


@dataclass(frozen=True)
class Depthwise(Fixed):
    FAMILY = "depthwise"
    CODE = 5
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_depthwise.cuh"
    COST = {"conv": "depthwise_conv_cost"}
    COST_SOURCE = "cost/depthwise.cpp"
    TOKEN = "dw"
    NO_KNOBS_WHY = " (it is one channel per group by definition)"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        direction = variant
        out = []
        rows, cols, chans = tile
        slide = rows > 1 if direction is Direction.BWD_WEIGHT else rows > 4
        out += half_precision_problems("depthwise convolution kernels", dtype)
        if layout is not None and layout.ndim == 3:
            out.append("the depthwise kernels take 1D and 2D layouts (3D: algorithm direct)")
        if layout is not None and layout.ndim == 1 and rows != 1:
            out.append(f"a 1D depthwise kernel has one output row per thread, not {rows}")
        if slide:
            if rows > 16 or not 1 <= cols <= 8 or chans not in (1, 2, 4):
                most = "2..16" if direction is Direction.BWD_WEIGHT else "5..16"
                out.append(f"sliding depthwise tile must be [{most} rows, 1..8 columns, 1|2|4 channels], "
                           f"not {list(tile)}")
        elif not 1 <= rows <= 4 or not 1 <= cols <= 8 or chans not in (2, 4, 8):
            out.append(f"depthwise tile must be [1..4 rows, 1..8 columns, 2|4|8 channels], not {list(tile)}")
        elif direction is not Direction.BWD_WEIGHT and rows * cols * chans > 64:
            out.append(f"{rows} x {cols} x {chans} is more than 64 values per thread")
        return out

    def instance(self, config) -> str:
        rows, cols, chans = config.tile
        return f"cuda::Sm90DwConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {rows}, {cols}, {chans}>"

    def info(self, config) -> dict:
        return {"channels_per_group": 1}
