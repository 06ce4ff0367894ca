"""blocked (cpu): our cache-blocked GEMM and implicit-GEMM convolution with an OpenMP
stream-K (bindings/cpu/). Knobs: the register micro tile (rows of A x columns of B) and, for
GEMM, `fusion`: none (D = alpha * A * B) or generic (every epilogue, batch and block-wise
scaling at run time: the reference implementation; name token `generic`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from string import Template

from ..frame import cpp_bool
from ..model import FNUZ, Backend, Feature, GemmVariant
from .base import Family

GEMM_INSTANCE = Template("""\
cpu::GemmKernelImpl<${elem}, ${dtype_code}, ${layout_code}, ${streamk}, ${reduction},
                        ${tile_m}, ${tile_n}, ${tile_k}, ${micro_m}, ${micro_n}, ${features}>""")

FUSIONS = ("none", "generic")
ALL_FEATURES = sum(f.code for f in Feature)

CONV_INSTANCE = Template("""\
cpu::ConvKernelImpl<${elem}, ${dtype_code}, ${ndim}, ${direction},
                        ${tile_m}, ${tile_n}, ${tile_k}, ${micro_m}, ${micro_n}>""")


@dataclass(frozen=True)
class Blocked(Family):
    micro_m: int = 6
    micro_n: int = 16
    fusion: str = "none"

    FAMILY = "blocked"
    CODE = 0
    BACKEND = Backend.CPU
    OPS = ("gemm", "conv")
    YAML_KEYS = ("micro_tile", "fusion")
    KEY_SHAPES = {"micro_tile": "pair"}
    HEADER = {"gemm": "cpu/gemm_kernel.hpp", "conv": "cpu/conv_kernel.hpp"}
    COST = {"gemm": "blocked_gemm_cost", "conv": "blocked_conv_cost"}
    COST_SOURCE = "cost/blocked.cpp"

    @classmethod
    def default(cls, op: str):
        return cls(6, 16) if op == "gemm" else cls(4, 16)

    @classmethod
    def from_yaml(cls, values: dict) -> "Blocked":
        cls.reject_keys(values)
        fusion = values.get("fusion", "none")
        if fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {fusion!r} (expected none or generic)")
        return cls(*values.get("micro_tile", (cls.micro_m, cls.micro_n)), fusion)

    @property
    def token(self) -> str:
        return f"r{self.micro_m}x{self.micro_n}" + ("_generic" if self.fusion == "generic" else "")

    @classmethod
    def from_token(cls, token: str):
        match = re.fullmatch(r"r(\d+)x(\d+)(_generic)?", token)
        if not match:
            return None
        return cls(int(match.group(1)), int(match.group(2)), "generic" if match.group(3) else "none")

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        tm, tn, tk = tile
        out = []
        if variant is GemmVariant.SPLIT_K:
            out.append("variant split_k is built by the cuda backend only (sm_90a)")
        if dtype in FNUZ:
            out.append(f"{dtype.key} (FNUZ) is built for gfx942 only")
        if op == "conv" and self.fusion != "none":
            out.append("fusion applies to gemm only")
        if not 1 <= self.micro_m <= 16:
            out.append(f"micro tile rows {self.micro_m} not in 1..16")
        if self.micro_n not in (4, 8, 16, 32):
            out.append(f"micro tile columns {self.micro_n} not one of 4, 8, 16, 32")
        if self.micro_m * self.micro_n > 128:
            out.append(f"micro tile {self.micro_m}x{self.micro_n} holds more than 128 accumulators")
        for label, value in (("M", tm), ("N", tn), ("K", tk)):
            if not 1 <= value <= 1024:
                out.append(f"tile {label} {value} not in 1..1024")
        if tm % self.micro_m:
            out.append(f"tile M {tm} is not a multiple of the micro tile rows {self.micro_m}")
        if tn % self.micro_n:
            out.append(f"tile N {tn} is not a multiple of the micro tile columns {self.micro_n}")
        if (tm + tn) * tk * 4 > 4 << 20:
            out.append(f"packed panels of tile {tm}x{tn}x{tk} exceed 4 MiB")
        return out

    def header(self, config) -> str:
        return self.HEADER[config.op]

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        common = {"elem": config.dtype.cpp, "dtype_code": config.dtype.code, "tile_m": tm, "tile_n": tn,
                  "tile_k": tk, "micro_m": self.micro_m, "micro_n": self.micro_n}
        if config.op == "gemm":
            streamk = config.variant is GemmVariant.STREAM_K
            return GEMM_INSTANCE.substitute(common, layout_code=config.layout.code, streamk=cpp_bool(streamk),
                                            reduction=config.reduction.code if streamk else -1,
                                            features=self.features)
        return CONV_INSTANCE.substitute(common, ndim=config.ndim, direction=config.direction.code)

    @property
    def features(self) -> int:
        """KernelInfo.features: every TD_FEATURE_* bit for a generic variant, else none."""
        return ALL_FEATURES if self.fusion == "generic" else 0

    def info(self, config) -> dict:
        values = {"micro_m": self.micro_m, "micro_n": self.micro_n}
        if config.op == "gemm":
            values["features"] = self.features
        return values

    def to_dict(self) -> dict:
        return {"micro_tile": [self.micro_m, self.micro_n], "fusion": self.fusion}
