"""cutlass (cuda, GEMM): CUTLASS sm90 GEMMs (bindings/cuda/gemm_sm90.cuh) in the standard,
stream-K and split-K variants. Knobs: the cluster shape, the kernel schedule (cooperative or
ping-pong), the epilogue (tma or nosmem), whether misaligned operands are staged through
aligned copies (misaligned: pad) and, for fp8, `promote`: how the tensor cores' short partial
sums reach the fp32 accumulators: `tile` (the default) every K tile through our mainloop with
two alternating sets of partial registers (bindings/cuda/fp8_mainloop.cuh: the tensor cores
never drain); N (4, 8, ...) every N MMAs of K 32 through CUTLASS's fp8 mainloop, which drains
them at each; `fast` never (CUTLASS's FP8FastAccum schedules: much less precise, so never
picked, run only when named).

Fused epilogues: `fusion` none (the default: CUTLASS's plain epilogue, no C operand) or an
epilogue visitor tree computing D = act(alpha * acc * row_scale[i] * col_scale[j] + beta * C +
bias) with beta, the bias (along N or M) and the scales chosen at run time and the activation
compiled in: `epilogue` (none), relu, gelu (erf), gelu_tanh, silu (name token `_fepi`,
`_frelu`, ...). `aux: store` also writes the pre-activation value (`_aux`); `out: fp32 | fp16 |
bf16 | fp8_e4m3 | fp8_e5m2` builds D of that type (`_ofp32`, ..., `_ofp8e4m3`; default: the input
type's output; the fp8 types for fp8 inputs only, stored with saturation)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..frame import cpp_bool
from ..model import FNUZ, Activation, Backend, DType, Feature, GemmVariant, Layout, OutDType
from .base import Family
from .sm90 import target_problems

SCHEDULES = {"cooperative": "coop", "pingpong": "pp"}
EPILOGUES = ("tma", "nosmem")
PROMOTES = (0, 1, 4, 8, 12, 16, 24, 32)
# fusion value -> (name token, TD_ACT_* code); "none": no visitor tree at all
FUSIONS = {"epilogue": ("epi", Activation.NONE), "relu": ("relu", Activation.RELU),
           "gelu": ("gelu", Activation.GELU), "gelu_tanh": ("gelu_tanh", Activation.GELU_TANH),
           "silu": ("silu", Activation.SILU)}
OUTS = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
FP8_OUTS = ("fp8_e4m3", "fp8_e5m2")
# What every fused variant takes at run time (the vectors are null-defaulted nodes, C is read
# only when beta != 0); a batch also runs on the plain data-parallel and stream-K variants.
FUSED_FEATURES = (Feature.BETA.code | Feature.BIAS_N.code | Feature.BIAS_M.code | Feature.ROW_SCALE.code
                  | Feature.COL_SCALE.code | Feature.BATCH.code)


def fp8_slices(regs: int, n: int) -> int:
    """N slices of a K tile's MMAs in our fp8 mainloop (bindings/cuda/fp8_mainloop.cuh,
    `fp8_slices`, the same rule) for a consumer warp group holding `regs` fp32 accumulators a
    thread in a tile `n` wide: 1 where two more full partial sets fit in 192 registers, else
    the fewest even count that fits; 0: none does."""
    if 3 * regs <= 192:
        return 1
    for h in range(2, n // 8 + 1, 2):
        if n % (8 * h) == 0 and regs + 2 * regs // h <= 192:
            return h
    return 0


def fp8_tile_slices(tile, schedule: str) -> int:
    """fp8_slices of a CUTLASS tile under a schedule: a cooperative tile's M is split over
    two consumer warp groups, a ping-pong tile is one warp group's."""
    tm, tn, _ = tile
    return fp8_slices((tm // 2 if schedule == "cooperative" else tm) * tn // 128, tn)


def parse_cluster(values: dict) -> tuple[int, int]:
    cluster = values.get("cluster", (1, 1))
    return cluster[0], cluster[1]


def cluster_token(prefix: str, cluster_m: int, cluster_n: int, schedule: str) -> str:
    """The name token of a CUTLASS family with a prefix: `<prefix>_c<m>x<n>_<coop|pp>`."""
    return f"{prefix}_c{cluster_m}x{cluster_n}_{SCHEDULES[schedule]}"


def parse_cluster_token(prefix: str, token: str):
    """(cluster_m, cluster_n, schedule) of a cluster_token, or None where it is not one."""
    match = re.fullmatch(rf"{prefix}_c(\d+)x(\d+)_(coop|pp)", token)
    if not match:
        return None
    schedule = {v: k for k, v in SCHEDULES.items()}[match.group(3)]
    return int(match.group(1)), int(match.group(2)), schedule


def check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule '{schedule}' (expected cooperative or pingpong)")


def tile_problems(dtype, tile, cluster_m: int, cluster_n: int) -> list[str]:
    """The rules every CUTLASS sm90 kernel shares: cluster sides, tile N, tile K."""
    out = []
    _, tn, tk = tile
    if cluster_m not in (1, 2) or cluster_n not in (1, 2):
        out.append(f"cluster {cluster_m}x{cluster_n}: each side must be 1 or 2")
    if tn % 16 or not 16 <= tn <= 256:
        out.append(f"tile N {tn} must be a multiple of 16 in 16..256")
    want_k = (128,) if dtype.nbytes == 1 else (64, 128)
    if tk not in want_k:
        out.append(f"tile K must be {' or '.join(map(str, want_k))} for {dtype.key} "
                   f"(128-byte rows of shared memory)")
    return out


def gemm_problems(dtype, layout, variant, tile, cluster_m, cluster_n, schedule, pad=False, promote=1) -> list[str]:
    """The sm90 CUTLASS GEMM rules (also those of the im2col convolution's GEMM)."""
    out = []
    tm, tn, tk = tile
    if dtype is DType.FP32:
        out.append("fp32 inputs are not built on the cuda backend (use fp16, bf16 or fp8)")
    if dtype in FNUZ:
        out.append(f"{dtype.key} (FNUZ) is built for gfx942 only; NVIDIA fp8 is OCP (fp8_e4m3, fp8_e5m2)")
    if dtype in (DType.FP8_E4M3, DType.FP8_E5M2) and layout is not Layout.RCR:
        out.append("fp8 wgmma needs K-major A and B: layout rcr only")
    out += tile_problems(dtype, tile, cluster_m, cluster_n)
    if variant is GemmVariant.STREAM_K and schedule != "cooperative":
        out.append("CUTLASS runs stream-K only with the cooperative schedule")
    if variant is GemmVariant.SPLIT_K and dtype not in (DType.FP16, DType.BF16):
        out.append(f"split_k is built for fp16 and bf16 (fp32 partials), not {dtype.key}")
    if variant is GemmVariant.SPLIT_K and pad:
        out.append("split_k reads its operands in place: misaligned reject only (a pad variant serves the rest)")
    if schedule == "cooperative" and tm not in (128, 256):
        out.append(f"the cooperative schedule needs tile M 128 or 256, not {tm}")
    # A ping-pong warp group holds the whole tile: 128x192 is 192 fp32 accumulators a thread,
    # compiled without spills; 128x256 would not fit.
    if schedule == "pingpong" and tm != 64 and tm * tn > 128 * 192:
        out.append(f"ping-pong tile {tm}x{tn} holds too many accumulators per warp group")
    if schedule == "pingpong" and tm not in (64, 128):
        out.append(f"the ping-pong schedule needs tile M 64 or 128, not {tm}")
    if (tm + tn) * tk * dtype.nbytes > 96 * 1024:
        out.append(f"tile {tm}x{tn}x{tk} needs more than 96 KiB of shared memory per stage")
    if promote == 1 and dtype in (DType.FP8_E4M3, DType.FP8_E5M2) and not fp8_tile_slices(tile, schedule):
        out.append(f"fp8 tile {tm}x{tn} with promote tile: no N slicing leaves room for the two partial sets "
                   f"(bindings/cuda/fp8_mainloop.cuh)")
    if promote != 1 and dtype not in (DType.FP8_E4M3, DType.FP8_E5M2):
        out.append(f"promote applies to fp8 only ({dtype.key} MMAs accumulate in fp32)")
    elif promote > 1 and promote % max(1, tk // 32):
        out.append(f"promote {promote} must be a multiple of the {tk // 32} MMAs of one K tile of {tk}")
    return out


@dataclass(frozen=True)
class Cutlass(Family):
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"  # cooperative | pingpong
    epilogue: str = "tma"          # tma | nosmem
    pad: bool = False              # misaligned: reject (False) | pad (True)
    promote: int = 1               # fp8: 1 = tile (ours), N = CUTLASS every N MMAs, 0 = fast (never picked)
    fusion: str = "none"           # none | epilogue | relu | gelu | gelu_tanh | silu
    aux: bool = False              # fused: also store the pre-activation value
    out: str = ""                  # fused: D's type (fp32 | fp16 | bf16 | fp8_e4m3 | fp8_e5m2); "": the input's

    FAMILY = "cutlass"
    CODE = 2
    BACKEND = Backend.CUDA
    OPS = ("gemm",)
    YAML_KEYS = ("cluster", "schedule", "epilogue", "misaligned", "promote", "fusion", "aux", "out")
    KEY_SHAPES = {"cluster": "pair", "promote": "int"}
    HEADER = "cuda/gemm_sm90.cuh"
    COST = {"gemm": "cutlass_gemm_cost"}
    COST_SOURCE = "cost/cutlass.cpp"

    def __post_init__(self):
        check_schedule(self.schedule)
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue '{self.epilogue}' (expected tma or nosmem)")
        if self.promote not in PROMOTES:
            raise ValueError(f"promote {self.promote!r} not one of tile, 4, 8, 12, 16, 24, 32 or fast")
        if self.fusion != "none" and self.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion '{self.fusion}' (expected none, {', '.join(FUSIONS)})")
        if self.out and self.out not in OUTS:
            raise ValueError(f"unknown out '{self.out}' (expected default, {', '.join(OUTS)})")
        if self.fusion == "none" and (self.aux or self.out):
            raise ValueError("aux and out come with a fused epilogue (fusion: epilogue or an activation)")

    @classmethod
    def from_yaml(cls, values: dict) -> "Cutlass":
        if "channels_per_group" in values:
            raise ValueError("channels_per_group applies only to algorithm direct")
        if "split" in values:
            raise ValueError("split applies only to algorithm implicit")
        misaligned = values.get("misaligned", "reject")
        if misaligned not in ("reject", "pad"):
            raise ValueError(f"unknown misaligned '{misaligned}' (expected reject or pad)")
        raw = values.get("promote", "tile")
        if isinstance(raw, str) and raw in ("tile", "fast"):
            promote = 1 if raw == "tile" else 0
        elif isinstance(raw, int) and not isinstance(raw, bool) and raw > 1:
            promote = raw  # the allowed intervals: __post_init__
        else:
            raise ValueError(f"promote must be tile, 4, 8, 12, 16, 24, 32 or fast, got {raw!r}")
        aux = values.get("aux", "none")
        if aux not in ("none", "store"):
            raise ValueError(f"unknown aux '{aux}' (expected none or store)")
        return cls(*parse_cluster(values), values.get("schedule", "cooperative"), values.get("epilogue", "tma"),
                   misaligned == "pad", promote, values.get("fusion", "none"), aux == "store",
                   "" if values.get("out", "default") == "default" else values["out"])

    @property
    def named_only(self) -> bool:
        """fp8 fast accumulation: a less precise contract, run only when named."""
        return self.promote == 0

    @property
    def token(self) -> str:
        parts = [f"c{self.cluster_m}x{self.cluster_n}", SCHEDULES[self.schedule]]
        if self.epilogue != "tma":
            parts.append(self.epilogue)
        if self.pad:
            parts.append("pad")
        if self.promote != 1:
            parts.append(f"p{self.promote}" if self.promote else "fastacc")
        if self.fusion != "none":
            parts.append("f" + FUSIONS[self.fusion][0])
        if self.aux:
            parts.append("aux")
        if self.out:
            parts.append("o" + self.out.replace("_", ""))
        return "_".join(parts)

    @classmethod
    def from_token(cls, token: str):
        match = re.fullmatch(r"c(\d+)x(\d+)_(coop|pp)(_nosmem)?(_pad)?(?:_p(\d+)|(_fastacc))?"
                             r"(?:_f(epi|relu|gelu_tanh|gelu|silu))?(_aux)?(?:_o(fp32|fp16|bf16|fp8e4m3|fp8e5m2))?", token)
        if not match:
            return None
        schedule = {v: k for k, v in SCHEDULES.items()}[match.group(3)]
        promote = 0 if match.group(7) else int(match.group(6) or 1)
        fusion = next((k for k, (tok, _) in FUSIONS.items() if tok == match.group(8)), "none")
        try:
            return cls(int(match.group(1)), int(match.group(2)), schedule, "nosmem" if match.group(4) else "tma",
                       bool(match.group(5)), promote, fusion, bool(match.group(9)),
                       (match.group(10) or "").replace("fp8e", "fp8_e"))
        except ValueError:
            return None

    @property
    def activation(self):
        """The Activation a fused variant applies (None: no fusion)."""
        return FUSIONS[self.fusion][1] if self.fusion != "none" else None

    def features(self, variant, dtype) -> int:
        """KernelInfo.features: a fused variant takes beta, bias, scales and a batch at run
        time (its activation, aux and output type as built); a plain data-parallel or stream-K
        variant without pad takes a batch."""
        if self.fusion == "none":
            return Feature.BATCH.code if variant is not GemmVariant.SPLIT_K and not self.pad else 0
        bits = FUSED_FEATURES
        if self.activation is not Activation.NONE:
            bits |= Feature.ACTIVATION.code
        if self.aux:
            bits |= Feature.AUX.code
        if self.out and self.out != dtype.out.key:
            bits |= Feature.OUT_DTYPE.code
        return bits

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        out = target_problems(target) or gemm_problems(
            dtype, layout, variant, tile, self.cluster_m, self.cluster_n, self.schedule, self.pad, self.promote)
        if self.fusion != "none":
            if variant is GemmVariant.SPLIT_K:
                out.append("a fused epilogue does not run with split_k: its second kernel sums fp32 partials "
                           "(the epilogue would need to run there)")
            if variant is GemmVariant.STREAM_K:
                out.append("a fused epilogue is built data-parallel only (stream-K with a visitor tree is not "
                           "compile-checked here)")
            if self.pad:
                out.append("a fused epilogue reads C, aux and its vectors in place: misaligned reject only")
            if self.epilogue != "tma":
                out.append("a fused epilogue needs the tma epilogue (CUTLASS's no-smem epilogue takes no visitor tree)")
        if self.out and self.out == dtype.out.key:
            out.append(f"out {self.out} is {dtype.key}'s default output: leave out unset")
        if self.out in FP8_OUTS and dtype.nbytes != 1:
            out.append(f"out {self.out} is built for fp8 inputs only, not {dtype.key}")
        return out

    def defines(self, config) -> str:
        # Programmatic dependent launch (cuda/gemm_sm90.cuh); CUTLASS 4.2's stream-K scheduler
        # does not compile with it (is_last_tile binds a const member to a non-const reference).
        if config.variant is GemmVariant.STREAM_K:
            return ""
        return "#define CUTLASS_ENABLE_GDC_FOR_SM90  // launched as a programmatic dependent\n"

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        streamk = config.variant is GemmVariant.STREAM_K
        reduction = config.reduction.code if streamk else -1
        split_k = ", true" if config.variant is GemmVariant.SPLIT_K else ""
        if self.fusion != "none":
            out_code = OutDType.parse(self.out).code if self.out else 0
            split_k = (f", {cpp_bool(config.variant is GemmVariant.SPLIT_K)}, {self.activation.code}, "
                       f"{cpp_bool(self.aux)}, {out_code}")
        return (f"cuda::Sm90Gemm<{config.dtype.code}, {config.layout.code}, {cpp_bool(streamk)}, {reduction}, "
                f"{tm}, {tn}, {tk},\n"
                f"                   {self.cluster_m}, {self.cluster_n}, {cpp_bool(self.schedule == 'pingpong')}, "
                f"{cpp_bool(self.epilogue == 'nosmem')}, {cpp_bool(self.pad)}, {self.promote}{split_k}>")

    def info(self, config) -> dict:
        return {"cluster_m": self.cluster_m, "cluster_n": self.cluster_n, "pingpong": int(self.schedule == "pingpong"),
                "nosmem_epilogue": int(self.epilogue == "nosmem"), "pad": int(self.pad), "promote": self.promote,
                "named_only": int(self.named_only), "features": self.features(config.variant, config.dtype)}

    def to_dict(self) -> dict:
        values = {"cluster": [self.cluster_m, self.cluster_n], "schedule": self.schedule,
                  "epilogue": self.epilogue, "misaligned": "pad" if self.pad else "reject"}
        if self.fusion != "none":
            values["fusion"] = self.fusion
            values["aux"] = "store" if self.aux else "none"
            if self.out:
                values["out"] = self.out
        return values
