"""cutlass_grouped (cuda, GEMM): CUTLASS sm90 pointer-array grouped GEMMs
(bindings/cuda/gemm_sm90_grouped.cuh): one persistent launch runs a list of GEMMs, each of its
own sizes and operands (mixture of experts), the problem sizes, operand pointers and strides
read from device memory. Its variants are of the GEMM variant `grouped`, which only grouped
calls run (td_gemm_grouped_run): the dispatcher core refuses them any plain problem
(kernel.hpp, kernel_supports). Knobs: the cluster shape and the kernel schedule (cooperative
or ping-pong); the rules are those of the cutlass family's tiles. D = alpha * A * B (no C, no
fused epilogue)."""
from __future__ import annotations

from dataclasses import dataclass

from ..frame import cpp_bool
from ..model import Backend, DType, GemmVariant
from .base import Family
from .cutlass import cluster_token, parse_cluster_token, check_schedule, gemm_problems, parse_cluster
from .sm90 import target_problems


@dataclass(frozen=True)
class CutlassGrouped(Family):
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"  # cooperative | pingpong

    FAMILY = "cutlass_grouped"
    CODE = 15
    BACKEND = Backend.CUDA
    OPS = ("gemm",)
    YAML_KEYS = ("cluster", "schedule")
    KEY_SHAPES = {"cluster": "pair"}
    HEADER = "cuda/gemm_sm90_grouped.cuh"
    COST = {"gemm": "cutlass_grouped_gemm_cost"}
    COST_SOURCE = "cost/cutlass_grouped.cpp"
    GROUPED = True  # builds the grouped GEMM variant, and only it (families.problems)

    def __post_init__(self):
        check_schedule(self.schedule)

    @classmethod
    def from_yaml(cls, values: dict) -> "CutlassGrouped":
        cls.reject_keys(values, " (it takes cluster and schedule)")
        return cls(*parse_cluster(values), values.get("schedule", "cooperative"))

    @property
    def token(self) -> str:
        return cluster_token("ptrarray", self.cluster_m, self.cluster_n, self.schedule)

    @classmethod
    def from_token(cls, token: str):
        parsed = parse_cluster_token("ptrarray", token)
        return None if parsed is None else cls(*parsed)

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        out = []
        if dtype not in (DType.FP16, DType.BF16, DType.FP8_E4M3):
            out.append(f"grouped GEMMs are built for fp16, bf16 and fp8_e4m3, not {dtype.key}")
        # the data-parallel rules of the cutlass family's tiles (the grouped variant is data-parallel)
        out += gemm_problems(dtype, layout, GemmVariant.STANDARD, tile, self.cluster_m, self.cluster_n,
                             self.schedule, promote=0 if dtype.nbytes == 1 else 1)
        return out

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        return (f"cuda::Sm90GroupedGemm<{config.dtype.code}, {config.layout.code}, {tm}, {tn}, {tk}, "
                f"{self.cluster_m}, {self.cluster_n}, {cpp_bool(self.schedule == 'pingpong')}>")

    def info(self, config) -> dict:
        return {"cluster_m": self.cluster_m, "cluster_n": self.cluster_n, "pingpong": int(self.schedule == "pingpong")}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "cluster": [self.cluster_m, self.cluster_n], "schedule": self.schedule}
