"""mfma (hip): our MFMA GEMM and implicit-GEMM convolution (bindings/hip/kernels_hip.hpp),
with CK Tile's knobs: wave shape (waves per block along M, N, K), warp tile (the MFMA
instruction shape), pipeline (mem: one LDS buffer; compv3: two, the next K tile loaded while
this one computes), scheduler (intrawave; interwave: raised wave priority around the MFMA
block) and padding (pad: any size, bounds-checked; nopad: sizes multiples of the tile). GEMM
also takes `fusion`, as the cpu family: none (D = alpha * A * B) or generic (beta * C, bias,
activation, aux, row and column scales, the output type and the batch at run time, in the
store stage; name token `generic`; no block-wise scales)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..frame import cpp_bool
from ..model import Backend, DType, Feature, GemmVariant
from .base import Family

# MFMA shapes (M, N, K per instruction, one 64-lane wave) by input type and architecture.
_MFMA_16BIT = {(32, 32, 8), (16, 16, 16)}
_MFMA_FP8 = {(32, 32, 16), (16, 16, 32)}
HIP_MFMA = {
    "gfx90a": {DType.FP16: _MFMA_16BIT, DType.BF16: _MFMA_16BIT},
    "gfx942": {DType.FP16: _MFMA_16BIT, DType.BF16: _MFMA_16BIT,
               DType.FP8_E4M3_FNUZ: _MFMA_FP8, DType.FP8_E5M2_FNUZ: _MFMA_FP8},
    "gfx950": {DType.FP16: _MFMA_16BIT, DType.BF16: _MFMA_16BIT,
               DType.FP8_E4M3: _MFMA_FP8, DType.FP8_E5M2: _MFMA_FP8},
}
HIP_WAVE_SHAPES = ((1, 4, 1), (2, 2, 1), (4, 1, 1))
HIP_LDS_BYTES = 64 * 1024
FUSIONS = ("none", "generic")
# KernelInfo.features of a generic variant: every bit but block-wise scales
GENERIC_FEATURES = sum(f.code for f in Feature if f is not Feature.BLOCK_SCALE)


@dataclass(frozen=True)
class Mfma(Family):
    wave_m: int = 2
    wave_n: int = 2
    wave_k: int = 1
    warp_m: int = 32
    warp_n: int = 32
    warp_k: int = 8
    pipeline: str = "compv3"
    scheduler: str = "intrawave"
    pad: bool = True
    fusion: str = "none"

    FAMILY = "mfma"
    CODE = 1
    BACKEND = Backend.HIP
    OPS = ("gemm", "conv")
    YAML_KEYS = ("wave_shape", "warp_tile", "pipeline", "scheduler", "padding", "fusion")
    KEY_SHAPES = {"wave_shape": "triple", "warp_tile": "triple"}
    HEADER = "hip/kernels_hip.hpp"
    COST = {"gemm": "mfma_gemm_cost", "conv": "mfma_conv_cost"}
    COST_SOURCE = "cost/mfma.cpp"
    PIPELINES = ("mem", "compv3")
    SCHEDULERS = ("intrawave", "interwave")

    def __post_init__(self):
        if self.pipeline not in self.PIPELINES:
            raise ValueError(f"unknown pipeline '{self.pipeline}' (expected mem or compv3)")
        if self.scheduler not in self.SCHEDULERS:
            raise ValueError(f"unknown scheduler '{self.scheduler}' (expected intrawave or interwave)")
        if self.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {self.fusion!r} (expected none or generic)")

    @classmethod
    def from_yaml(cls, values: dict) -> "Mfma":
        cls.reject_keys(values)
        waves = values.get("wave_shape", (2, 2, 1))
        warp = values.get("warp_tile", (32, 32, 8))
        padding = values.get("padding", "pad")
        if padding not in ("pad", "nopad"):
            raise ValueError(f"unknown padding '{padding}' (expected pad or nopad)")
        return cls(*waves, *warp, values.get("pipeline", "compv3"), values.get("scheduler", "intrawave"),
                   padding == "pad", values.get("fusion", "none"))

    @property
    def waves(self):
        return (self.wave_m, self.wave_n, self.wave_k)

    @property
    def warp(self):
        return (self.warp_m, self.warp_n, self.warp_k)

    @property
    def token(self) -> str:
        return (f"w{self.wave_m}x{self.wave_n}x{self.wave_k}_m{self.warp_m}x{self.warp_n}x{self.warp_k}_"
                f"{self.pipeline}_{self.scheduler}_{'pad' if self.pad else 'nopad'}"
                + ("_generic" if self.fusion == "generic" else ""))

    @classmethod
    def from_token(cls, token: str):
        match = re.fullmatch(r"w(\d+)x(\d+)x(\d+)_m(\d+)x(\d+)x(\d+)_(mem|compv3)_(intrawave|interwave)_(pad|nopad)"
                             r"(_generic)?", token)
        if not match:
            return None
        nums = [int(v) for v in match.groups()[:6]]
        return cls(*nums, match.group(7), match.group(8), match.group(9) == "pad",
                   "generic" if match.group(10) else "none")

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        """Per-architecture rules: MFMA shapes per dtype, wave shapes, LDS capacity."""
        out = []
        tm, tn, tk = tile
        shapes = HIP_MFMA.get(target)
        if shapes is None:
            return [f"the hip backend builds for {', '.join(HIP_MFMA)}, not {target}"]
        if variant is GemmVariant.SPLIT_K:
            out.append("variant split_k is built by the cuda backend only (sm_90a)")
        if dtype not in shapes:
            have = ", ".join(d.key for d in shapes)
            out.append(f"{target} has no MFMA for {dtype.key} (it has: {have})")
        elif self.warp not in shapes[dtype]:
            out.append(f"warp tile {self.warp_m}x{self.warp_n}x{self.warp_k} is not an MFMA shape of {dtype.key} on "
                       f"{target} (expected one of {', '.join('x'.join(map(str, s)) for s in sorted(shapes[dtype]))})")
        if self.waves not in HIP_WAVE_SHAPES:
            out.append(f"wave shape {'x'.join(map(str, self.waves))} not one of 1x4x1, 2x2x1, 4x1x1")
        if tm % (self.wave_m * self.warp_m):
            out.append(f"tile M {tm} is not a multiple of waves x warp tile ({self.wave_m} x {self.warp_m})")
        if tn % (self.wave_n * self.warp_n):
            out.append(f"tile N {tn} is not a multiple of waves x warp tile ({self.wave_n} x {self.warp_n})")
        if tk % self.warp_k:
            out.append(f"tile K {tk} is not a multiple of the warp tile K {self.warp_k}")
        buffers = 2 if self.pipeline == "compv3" else 1
        lds = buffers * (tm + tn) * tk * dtype.nbytes
        if lds > HIP_LDS_BYTES:
            out.append(f"tile {tm}x{tn}x{tk} with pipeline {self.pipeline} needs {lds} bytes of LDS (64 KiB max)")
        per_lane = (tm // max(1, self.wave_m)) * (tn // max(1, self.wave_n)) // 64
        if per_lane > 128:
            out.append(f"{per_lane} accumulators per lane (more than 128)")
        if op == "conv" and self.fusion != "none":
            out.append("fusion applies to gemm only")
        if op == "conv" and variant is not None and tk < 8:
            out.append("conv tiles need K >= 8")
        return out

    def instance(self, config) -> str:
        knobs = (f"{', '.join(map(str, config.tile))}, {', '.join(map(str, self.waves))}, "
                 f"{', '.join(map(str, self.warp))},\n"
                 f"                 {cpp_bool(self.pipeline == 'compv3')}, {cpp_bool(self.scheduler == 'interwave')}, "
                 f"{cpp_bool(self.pad)}>")
        if config.op == "gemm":
            streamk = config.variant is GemmVariant.STREAM_K
            reduction = config.reduction.code if streamk else -1
            head = f"{config.dtype.code}, {config.layout.code}, {cpp_bool(streamk)}, {reduction}"
            if self.fusion == "generic":
                return f"hip::HipGemmGeneric<{head}, {knobs[:-1]}, {self.features}>"
            return f"hip::HipGemm<{head}, {knobs}"
        return f"hip::HipConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {knobs}"

    @property
    def features(self) -> int:
        """KernelInfo.features: the bits a generic variant implements, else none."""
        return GENERIC_FEATURES if self.fusion == "generic" else 0

    def info(self, config) -> dict:
        values = {"wave_m": self.wave_m, "wave_n": self.wave_n, "wave_k": self.wave_k, "warp_m": self.warp_m,
                  "warp_n": self.warp_n, "warp_k": self.warp_k, "double_buffer": int(self.pipeline == "compv3"),
                  "interwave": int(self.scheduler == "interwave"), "pad": int(self.pad)}
        if config.op == "gemm":
            values["features"] = self.features
        return values

    def to_dict(self) -> dict:
        return {"wave_shape": list(self.waves), "warp_tile": list(self.warp), "pipeline": self.pipeline,
                "scheduler": self.scheduler, "padding": "pad" if self.pad else "nopad", "fusion": self.fusion}
