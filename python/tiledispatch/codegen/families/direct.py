"""direct (cuda, convolution): our direct grouped-convolution kernels
(bindings/cuda/conv_direct.cuh), specialised for `channels_per_group` input = output channels
per group (any: a generic kernel with run-time channel counts). Tile = (output pixels per
thread, channels per thread, threads per block)."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, Direction
from .base import PerGroup
from .sm90 import half_precision_problems, target_problems


@dataclass(frozen=True)
class Direct(PerGroup):
    channels_per_group: int = 0  # 0: any (the generic kernel)

    FAMILY = "direct"
    CODE = 4
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_direct.cuh"
    COST = {"conv": "direct_conv_cost"}
    COST_SOURCE = "cost/direct.cpp"
    CPG = (0, 1, 2, 4, 8, 16)
    CPG_LABEL = "1, 2, 4, 8, 16 or any"
    TOKEN = "direct"

    @classmethod
    def from_yaml(cls, values: dict) -> "Direct":
        if values.get("channels_per_group", "any") == "any":
            cls.reject_keys(values)
            return cls(0)
        return super().from_yaml(values)

    @property
    def token(self) -> str:
        return "direct_anycpg" if self.channels_per_group == 0 else super().token

    @classmethod
    def from_token(cls, token: str):
        return cls(0) if token == "direct_anycpg" else super().from_token(token)

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        direction = variant
        out = []
        pixels, chans, threads = tile
        cpg = self.channels_per_group
        out += half_precision_problems("direct convolution kernels", dtype)
        if threads not in (64, 128, 256, 512):
            out.append(f"threads per block {threads} not one of 64, 128, 256, 512")
        if cpg == 0:
            if (pixels, chans) != (1, 1):
                out.append("the generic kernel (channels_per_group any) computes one output per thread: tile 1x1xT")
            return out
        if chans % 8 or chans > 32:
            out.append(f"channels per thread {chans} must be a multiple of 8 (16-byte vectors) up to 32")
        if chans % cpg:
            out.append(f"channels per thread {chans} must hold whole groups of {cpg}")
        if direction is Direction.BWD_WEIGHT:
            if pixels != 1:
                out.append("bwd_weight reduces over pixels: output pixels per thread must be 1")
        else:
            if not 1 <= pixels <= 8:
                out.append(f"output pixels per thread {pixels} not in 1..8")
            if pixels * chans > 64:
                out.append(f"{pixels} pixels x {chans} channels is more than 64 accumulators per thread")
        return out

    def instance(self, config) -> str:
        pixels, chans, threads = config.tile
        head = f"{config.dtype.code}, {config.ndim}, {config.direction.code}"
        return f"cuda::Sm90DirectConv<{head}, {self.channels_per_group}, {pixels}, {chans}, {threads}>"

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "channels_per_group": self.channels_per_group or "any"}
