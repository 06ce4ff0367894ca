"""im2col (cuda, dense convolution): a CUTLASS sm90 GEMM over an im2col buffer
(bindings/cuda/conv_gemm.cuh; a 1x1 stride-1 unpadded problem needs no buffer). Knobs: the
GEMM's cluster shape and schedule; `gemm`: standard (data-parallel tiles) or split_k
(bwd_weight: the reduction over the output pixels cut into equal parts with fp32 partials,
summed by a second kernel); `misaligned`: reject (C and K multiples of 8) or pad (any channel
counts, run on channel-padded operands). Its rules are the GEMM's."""
from __future__ import annotations

from dataclasses import dataclass

from ..frame import cpp_bool
from ..model import Backend, DType, Direction, GemmVariant, Layout
from .base import Family
from .cutlass import cluster_token, parse_cluster_token, check_schedule, gemm_problems, parse_cluster
from .sm90 import target_problems


@dataclass(frozen=True)
class Im2col(Family):
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"
    split_k: bool = False
    pad: bool = False  # misaligned: reject (False) | pad (True)

    FAMILY = "im2col"
    CODE = 10
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    YAML_KEYS = ("cluster", "schedule", "gemm", "misaligned")
    GEMMS = ("standard", "split_k")
    KEY_SHAPES = {"cluster": "pair"}
    HEADER = "cuda/conv_gemm.cuh"
    COST = {"conv": "im2col_conv_cost"}
    COST_SOURCE = "cost/im2col.cpp"

    def __post_init__(self):
        check_schedule(self.schedule)

    @classmethod
    def from_yaml(cls, values: dict) -> "Im2col":
        if "split" in values:
            raise ValueError("split applies only to algorithm implicit")
        if values.get("epilogue", "tma") != "tma":
            raise ValueError("algorithm im2col takes cluster, schedule, gemm and misaligned only")
        cls.reject_keys({k: v for k, v in values.items() if k != "epilogue"})
        gemm = values.get("gemm", "standard")
        if gemm not in cls.GEMMS:
            raise ValueError(f"gemm {gemm!r} not one of {', '.join(cls.GEMMS)}")
        misaligned = values.get("misaligned", "reject")
        if misaligned not in ("reject", "pad"):
            raise ValueError(f"unknown misaligned '{misaligned}' (expected reject or pad)")
        return cls(*parse_cluster(values), values.get("schedule", "cooperative"), gemm == "split_k",
                   misaligned == "pad")

    @property
    def token(self) -> str:
        return (cluster_token("im2col", self.cluster_m, self.cluster_n, self.schedule) +
                ("_splitk" if self.split_k else "") + ("_pad" if self.pad else ""))

    @classmethod
    def from_token(cls, token: str):
        pad = token.endswith("_pad")
        token = token[:-len("_pad")] if pad else token
        split_k = token.endswith("_splitk")
        parsed = parse_cluster_token("im2col", token[:-len("_splitk")] if split_k else token)
        return None if parsed is None else cls(*parsed, split_k, pad)

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        if target_problems(target):
            return target_problems(target)
        if dtype not in (DType.FP16, DType.BF16):
            return [f"im2col convolution takes fp16 or bf16, not {dtype.key}"]
        gemm_layout = Layout.CRR if variant is Direction.BWD_WEIGHT else Layout.RCR
        out = []
        if self.split_k and variant is not Direction.BWD_WEIGHT:
            out.append("gemm split_k (a split of the reduction over the output pixels) applies to bwd_weight only")
        if self.split_k and self.schedule != "cooperative":
            out.append("gemm split_k is built with the cooperative schedule")
        gemm_variant = GemmVariant.SPLIT_K if self.split_k else GemmVariant.STANDARD
        return out + gemm_problems(dtype, gemm_layout, gemm_variant, tile, self.cluster_m, self.cluster_n,
                                   self.schedule)

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        return (f"cuda::Sm90GemmConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {tm}, {tn}, {tk},\n"
                f"                       {self.cluster_m}, {self.cluster_n}, {cpp_bool(self.schedule == 'pingpong')}, "
                f"{cpp_bool(self.split_k)}, {cpp_bool(self.pad)}>")

    def info(self, config) -> dict:
        return {"cluster_m": self.cluster_m, "cluster_n": self.cluster_n, "pingpong": int(self.schedule == "pingpong"),
                "variant": (GemmVariant.SPLIT_K if self.split_k else GemmVariant.STANDARD).code, "pad": int(self.pad)}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "cluster": [self.cluster_m, self.cluster_n], "schedule": self.schedule,
                **({"gemm": "split_k"} if self.split_k else {}), **({"misaligned": "pad"} if self.pad else {})}
