"""cutlass_blockwise (cuda, GEMM): fp8 GEMMs with block-wise scales, one fp32 scale per 1x128
block of A and per 128x128 block of B (DeepSeek-V3 style), on CUTLASS's sm90 blockwise-scaled
fp8 mainloop (bindings/cuda/gemm_sm90_blockwise.cuh). Knobs: the cluster and the kernel
schedule (cooperative or ping-pong). Its kernels implement TD_FEATURE_BLOCK_SCALE and run only
problems that have block-wise scales; plain fp8 problems go to the cutlass family."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend, DType, Feature, GemmVariant, Layout
from .base import Family
from .cutlass import cluster_token, parse_cluster_token, check_schedule, parse_cluster, tile_problems
from .sm90 import target_problems

SCALE_BLOCK = 128  # K and N extent of one scale block


def accumulators(tile, schedule: str) -> int:
    """fp32 accumulators a consumer thread holds: a cooperative tile's M is split over two
    warp groups, a ping-pong tile is one warp group's (128 threads)."""
    tm, tn, _ = tile
    return (tm // 2 if schedule == "cooperative" else tm) * tn // 128


def blockwise_problems(dtype, layout, variant, tile, cluster_m: int, cluster_n: int, schedule: str) -> list[str]:
    out = []
    tm, tn, tk = tile
    if dtype not in (DType.FP8_E4M3, DType.FP8_E5M2):
        out.append(f"block-wise scaling is built for fp8_e4m3 and fp8_e5m2, not {dtype.key}")
    if layout is not Layout.RCR:
        out.append("fp8 wgmma needs K-major A and B: layout rcr only")
    if variant is not GemmVariant.STANDARD:
        out.append("the blockwise kernels are variant standard (data-parallel tiles)")
    out += tile_problems(dtype, tile, cluster_m, cluster_n)  # tile K 128: one K tile is one scale block
    # With A's scales per row, CUTLASS 4.2's mainloop takes one scale of B a tile (a tile N of 256
    # fails its static assertion "Accumulator and scaleB must have same shape").
    if tn != SCALE_BLOCK:
        out.append(f"tile N must be {SCALE_BLOCK}, not {tn}: one scale block of B a tile (CUTLASS's "
                   f"blockwise mainloop with per-row scales of A)")
    if schedule == "cooperative" and tm not in (128, 256):
        out.append(f"the cooperative schedule needs tile M 128 or 256, not {tm}")
    if schedule == "pingpong" and tm not in (64, 128):
        out.append(f"the ping-pong schedule needs tile M 64 or 128, not {tm}")
    if 2 * accumulators(tile, schedule) > 192:
        out.append(f"{schedule} tile {tm}x{tn}: the mainloop's two accumulator sets (the scaled sum and the "
                   f"tensor cores' partial) take more than 192 registers a thread")
    return out


@dataclass(frozen=True)
class CutlassBlockwise(Family):
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"  # cooperative | pingpong

    FAMILY = "cutlass_blockwise"
    CODE = 16
    BACKEND = Backend.CUDA
    OPS = ("gemm",)
    YAML_KEYS = ("cluster", "schedule")
    KEY_SHAPES = {"cluster": "pair"}
    HEADER = "cuda/gemm_sm90_blockwise.cuh"
    COST = {"gemm": "cutlass_blockwise_gemm_cost"}
    COST_SOURCE = "cost/cutlass_blockwise.cpp"
    FEATURES = Feature.BLOCK_SCALE.code

    def __post_init__(self):
        check_schedule(self.schedule)

    @classmethod
    def from_yaml(cls, values: dict) -> "CutlassBlockwise":
        cls.reject_keys(values, " (its knobs are the cluster and the schedule)")
        return cls(*parse_cluster(values), values.get("schedule", "cooperative"))

    @property
    def token(self) -> str:
        return cluster_token("blockwise", self.cluster_m, self.cluster_n, self.schedule)

    @classmethod
    def from_token(cls, token: str):
        parsed = parse_cluster_token("blockwise", token)
        return None if parsed is None else cls(*parsed)

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        return target_problems(target) or blockwise_problems(
            dtype, layout, variant, tile, self.cluster_m, self.cluster_n, self.schedule)

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        return (f"cuda::Sm90BlockwiseGemm<{config.dtype.code}, {tm}, {tn}, {tk}, {self.cluster_m}, {self.cluster_n}, "
                f"{'true' if self.schedule == 'pingpong' else 'false'}>")

    def info(self, config) -> dict:
        return {"cluster_m": self.cluster_m, "cluster_n": self.cluster_n, "pingpong": int(self.schedule == "pingpong"),
                "features": self.FEATURES}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "cluster": [self.cluster_m, self.cluster_n], "schedule": self.schedule}
