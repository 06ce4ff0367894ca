"""implicit (cuda, dense convolution): CUTLASS sm90 implicit-GEMM convolution
(bindings/cuda/conv_implicit.cuh). Knobs: the cluster shape (CUTLASS has one sm90 conv kernel
schedule, the non-persistent warp-specialized one) and, for bwd_weight, `split`: the batch
split into at most that many concurrent CUTLASS launches with fp32 partials."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model import Backend, DType, Direction
from .base import Family
from .cutlass import parse_cluster, tile_problems
from .sm90 import target_problems

SPLITS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Implicit(Family):
    cluster_m: int = 1
    cluster_n: int = 1
    split: int = 1

    FAMILY = "implicit"
    CODE = 11
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    YAML_KEYS = ("cluster", "split")
    KEY_SHAPES = {"cluster": "pair", "split": "int"}
    HEADER = "cuda/conv_implicit.cuh"
    COST = {"conv": "implicit_conv_cost"}
    COST_SOURCE = "cost/implicit.cpp"

    def __post_init__(self):
        if self.split not in SPLITS:
            raise ValueError(f"split {self.split!r} not one of 1, 2, 4, 8")

    @classmethod
    def from_yaml(cls, values: dict) -> "Implicit":
        if set(values) - {"algorithm", "cluster", "split"}:
            raise ValueError("algorithm implicit takes cluster and split only (CUTLASS's sm90 convolution has one "
                             "kernel schedule)")
        return cls(*parse_cluster(values), values.get("split", 1))

    @property
    def token(self) -> str:
        return f"implicit_c{self.cluster_m}x{self.cluster_n}" + (f"_s{self.split}" if self.split > 1 else "")

    @classmethod
    def from_token(cls, token: str):
        match = re.fullmatch(r"implicit_c(\d+)x(\d+)(?:_s(\d+))?", token)
        return cls(int(match.group(1)), int(match.group(2)), int(match.group(3) or 1)) if match else None

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        if dtype not in (DType.FP16, DType.BF16):
            return [f"implicit convolution takes fp16 or bf16, not {dtype.key}"]
        tm, tn, _ = tile
        out = tile_problems(dtype, tile, self.cluster_m, self.cluster_n)
        if tm not in (64, 128, 256):
            out.append(f"implicit conv tile M {tm} not one of 64, 128, 256")
        if tm * tn > 128 * 128:  # ptxas serializes wgmma beyond that (warning C7511)
            out.append(f"implicit conv tile {tm}x{tn} holds too many accumulators for its one consumer warp group")
        if self.split > 1 and variant is not Direction.BWD_WEIGHT:
            out.append("split (a batch split with fp32 partials) applies to bwd_weight only")
        return out

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        return (f"cuda::Sm90ImplicitConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {tm}, {tn}, {tk}, "
                f"{self.cluster_m}, {self.cluster_n}" + (f", {self.split}>" if self.split > 1 else ">"))

    def info(self, config) -> dict:
        return {"cluster_m": self.cluster_m, "cluster_n": self.cluster_n, "split": self.split}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "cluster": [self.cluster_m, self.cluster_n],
                **({"split": self.split} if self.split > 1 else {})}
