"""toeplitz_mma (cuda, convolution, 2 or 4 channels per group, fwd and bwd_data, 2D): the
depthwise_mma kernels for grouped convolution (bindings/cuda/conv_depthwise_mma.cuh): each
output channel sums the Toeplitz products of its group's inputs. Tile as depthwise_mma's."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model import Backend
from .base import Family
from .depthwise_mma import toeplitz_problems
from .direct import channels_per_group
from .sm90 import target_problems


@dataclass(frozen=True)
class ToeplitzMma(Family):
    channels_per_group: int = 2

    FAMILY = "toeplitz_mma"
    CODE = 7
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    YAML_KEYS = ("channels_per_group",)
    KEY_SHAPES = {"channels_per_group": "int"}
    HEADER = "cuda/conv_depthwise_mma.cuh"
    COST = {"conv": "toeplitz_mma_conv_cost"}
    CPG = (2, 4)

    def __post_init__(self):
        if self.channels_per_group not in self.CPG:
            raise ValueError(f"channels_per_group {self.channels_per_group} not one of 2, 4 (toeplitz_mma)")

    @classmethod
    def from_yaml(cls, values: dict) -> "ToeplitzMma":
        return cls(channels_per_group(cls, values, cls.CPG, "2, 4 (toeplitz_mma)"))

    @property
    def token(self) -> str:
        return f"tpmma_cpg{self.channels_per_group}"

    @classmethod
    def from_token(cls, token: str):
        match = re.fullmatch(r"tpmma_cpg(\d+)", token)
        return cls(int(match.group(1))) if match else None

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        return target_problems(target) or toeplitz_problems(self.FAMILY, dtype, variant, tile, layout)

    def instance(self, config) -> str:
        rows, cols, chans = config.tile
        return (f"cuda::Sm90DwMmaConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {rows}, {cols}, "
                f"{chans}, {self.channels_per_group}>")

    def info(self, config) -> dict:
        return {"channels_per_group": self.channels_per_group}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "channels_per_group": self.channels_per_group}
