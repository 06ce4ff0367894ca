"""The kernel model: enums with their renderings, targets, and frozen kernel configs.

A config's `.name` is its identity: every field that changes the generated code
is in it, in a fixed order, `[a-z0-9_]` only, target last. `from_name` parses a
name back, so `Config.from_name(c.name) == c` for every config.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass

SCHEMA_VERSION = 1
ABI_VERSION = 2


def _lookup(cls, text: str, what: str, fields=("key",)):
    """The member of enum cls whose rendering in `fields` is text, else ValueError."""
    for member in cls:
        if any(text == getattr(member, f) for f in fields):
            return member
    raise ValueError(f"unknown {what} '{text}' (expected one of {', '.join(m.key for m in cls)})")


class DType(enum.Enum):
    """Input element types. `out` is the output type a kernel writes."""

    #       key         token      code  bytes  out         numpy (ml_dtypes) name
    FP32 = ("fp32", "fp32", 0, 4, "fp32", "float32")
    FP16 = ("fp16", "fp16", 1, 2, "fp16", "float16")
    BF16 = ("bf16", "bf16", 2, 2, "bf16", "bfloat16")
    FP8_E4M3 = ("fp8_e4m3", "fp8e4m3", 3, 1, "bf16", "float8_e4m3fn")
    FP8_E5M2 = ("fp8_e5m2", "fp8e5m2", 4, 1, "bf16", "float8_e5m2")
    # FNUZ fp8 (no negative zero, NaN = 0x80, exponent bias one higher): MI300 (gfx942).
    FP8_E4M3_FNUZ = ("fp8_e4m3_fnuz", "fp8e4m3fnuz", 5, 1, "bf16", "float8_e4m3fnuz")
    FP8_E5M2_FNUZ = ("fp8_e5m2_fnuz", "fp8e5m2fnuz", 6, 1, "bf16", "float8_e5m2fnuz")

    def __init__(self, key, token, code, nbytes, out_key, numpy_name):
        self.key = key
        self.token = token
        self.code = code
        self.nbytes = nbytes
        self.out_key = out_key
        self.numpy_name = numpy_name

    @property
    def out(self) -> "DType":
        return DType.parse(self.out_key)

    @property
    def cpp(self) -> str:
        """The C++ element tag in bindings/ (td::fp32_t, td::bf16_t, ...)."""
        return f"td::{self.token}_t"

    @classmethod
    def parse(cls, text: str) -> "DType":
        return _lookup(cls, text, "dtype", ("key", "token"))

    @classmethod
    def from_code(cls, code: int) -> "DType":
        for member in cls:
            if member.code == code:
                return member
        raise ValueError(f"unknown dtype code {code}")


class Layout(enum.Enum):
    """GEMM layouts: A, B, C each row- (r) or column-major (c)."""

    RCR = ("rcr", 0)
    RRR = ("rrr", 1)
    CRR = ("crr", 2)
    CCR = ("ccr", 3)

    def __init__(self, key, code):
        self.key = key
        self.token = key
        self.code = code

    @property
    def a_row(self) -> bool:
        return self.key[0] == "r"

    @property
    def b_row(self) -> bool:
        return self.key[1] == "r"

    @property
    def c_row(self) -> bool:
        return self.key[2] == "r"

    @classmethod
    def parse(cls, text: str) -> "Layout":
        return _lookup(cls, text, "layout")


class GemmVariant(enum.Enum):
    """standard: data-parallel tiles; stream_k: CUTLASS's stream-K scheduler (K steps
    balanced over the SMs, split tiles fixed up in the kernel); split_k: K cut into equal
    parts run as the batch of one data-parallel kernel with fp32 partials, summed by a second
    kernel (cuBLAS's split-K; cuda backend)."""

    STANDARD = ("standard", 0)
    STREAM_K = ("stream_k", 1)
    SPLIT_K = ("split_k", 2)

    def __init__(self, key, code):
        self.key = key
        self.code = code

    @classmethod
    def parse(cls, text: str) -> "GemmVariant":
        return _lookup(cls, text, "variant")


class Reduction(enum.Enum):
    """How stream-K combines the partial tiles of a split output tile."""

    ATOMIC = ("atomic", 0)
    DETERMINISTIC = ("deterministic", 1)

    def __init__(self, key, code):
        self.key = key
        self.code = code

    @classmethod
    def parse(cls, text: str) -> "Reduction":
        return _lookup(cls, text, "reduction")


class Direction(enum.Enum):
    """Convolution directions. `code` is ConvProblemC.direction."""

    FWD = ("fwd", "fwd", 0)
    BWD_DATA = ("bwd_data", "bwddata", 1)
    BWD_WEIGHT = ("bwd_weight", "bwdweight", 2)

    def __init__(self, key, token, code):
        self.key = key
        self.token = token
        self.code = code

    @classmethod
    def parse(cls, text: str) -> "Direction":
        return _lookup(cls, text, "direction", ("key", "token"))

    @classmethod
    def from_code(cls, code: int) -> "Direction":
        for member in cls:
            if member.code == code:
                return member
        raise ValueError(f"unknown direction code {code}")


class ConvLayout(enum.Enum):
    """Grouped-conv layouts: (input, weight, output), channels-last with groups."""

    NWGC = ("NWGC", "GKXC", "NWGK", 1)
    NHWGC = ("NHWGC", "GKYXC", "NHWGK", 2)
    NDHWGC = ("NDHWGC", "GKZYXC", "NDHWGK", 3)

    def __init__(self, input_layout, weight_layout, output_layout, ndim):
        self.input_layout = input_layout
        self.weight_layout = weight_layout
        self.output_layout = output_layout
        self.ndim = ndim
        self.token = input_layout.lower()
        self.key = f"{input_layout},{weight_layout},{output_layout}"

    @classmethod
    def parse(cls, text: str) -> "ConvLayout":
        cleaned = text.replace(" ", "")
        for member in cls:
            if cleaned in (member.key, member.token, member.input_layout):
                return member
        raise ValueError(
            f"unknown conv layout '{text}' (expected one of {', '.join(m.key for m in cls)})")

    @classmethod
    def for_ndim(cls, ndim: int) -> "ConvLayout":
        for member in cls:
            if member.ndim == ndim:
                return member
        raise ValueError(f"convolution supports 1, 2 or 3 spatial dims, got {ndim}")


class Backend(enum.Enum):
    """Code generators. `implemented` says whether this build can emit for it."""

    CPU = ("cpu", ".cpp", "the C++ compiler", True)
    CUDA = ("cuda", ".cu", "nvcc (CUDA toolkit)", True)
    HIP = ("hip", ".hip", "hipcc or clang -x hip (ROCm)", True)

    def __init__(self, key, suffix, compiler, implemented):
        self.key = key
        self.suffix = suffix
        self.compiler = compiler
        self.implemented = implemented


KNOWN_TARGETS = (
    "cpu",
    "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120a",
    "gfx90a", "gfx942", "gfx950",
)


def backend_of(target: str) -> Backend:
    if target == "cpu":
        return Backend.CPU
    if target.startswith("sm_"):
        return Backend.CUDA
    if target.startswith("gfx"):
        return Backend.HIP
    raise ValueError(f"unknown target '{target}'")


def check_target(target: str) -> str:
    if target not in KNOWN_TARGETS:
        raise ValueError(f"unknown target '{target}' (expected one of {', '.join(KNOWN_TARGETS)})")
    return target


def target_token(target: str) -> str:
    return target.replace("_", "")


def target_from_token(token: str) -> str:
    for target in KNOWN_TARGETS:
        if target_token(target) == token:
            return target
    raise ValueError(f"unknown target token '{token}'")


# --------------------------------------------------------------------------- cpu knobs

@dataclass(frozen=True)
class CpuKnobs:
    """cpu backend knobs: the register micro-tile (rows of A x columns of B)."""

    micro_m: int = 6
    micro_n: int = 16

    @property
    def token(self) -> str:
        return f"r{self.micro_m}x{self.micro_n}"

    @classmethod
    def from_token(cls, token: str) -> "CpuKnobs":
        match = re.fullmatch(r"r(\d+)x(\d+)", token)
        if not match:
            raise ValueError(f"bad cpu knob token '{token}'")
        return cls(int(match.group(1)), int(match.group(2)))

    YAML_KEYS = ("micro_tile",)

    @classmethod
    def from_yaml(cls, values: dict) -> "CpuKnobs":
        micro = values.get("micro_tile", (cls.micro_m, cls.micro_n))
        return cls(*micro)

    def problems(self, op: str, dtype: "DType", layout, variant, tile, target) -> list[str]:
        """Why the cpu backend cannot build this variant (empty: it can)."""
        tm, tn, tk = tile
        out = []
        if variant is GemmVariant.SPLIT_K:
            out.append("variant split_k is built by the cuda backend only (sm_90a)")
        if dtype in FNUZ:
            out.append(f"{dtype.key} (FNUZ) is built for gfx942 only")
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


# --------------------------------------------------------------------------- cuda knobs

@dataclass(frozen=True)
class CudaKnobs:
    """cuda backend knobs.

    algorithm `cutlass` (GEMM): CUTLASS sm90 cluster shape, kernel schedule, epilogue
    schedule, whether misaligned operands are staged through aligned copies, and for fp8
    `promote`, how the tensor cores' short partial sums reach the fp32 accumulators: `tile`
    (the default) every K tile through our mainloop with two alternating sets of partial
    registers (bindings/cuda/fp8_mainloop.cuh: the tensor cores never drain); N (4, 8, ...)
    every N MMAs of K 32 through CUTLASS's fp8 mainloop, which drains them at each; `fast`
    never (CUTLASS's FP8FastAccum schedules: much less precise, so never picked, run only
    when named).
    algorithm `skinny` (GEMM, rcr): our decode-shape kernel (bindings/cuda/gemm_skinny.cuh),
    B's rows streamed in 16-byte vectors straight into mma.sync fragments, split-K at run
    time; tile = (rows of A a block, rows of B a block, k of one block step).
    algorithm `implicit` (dense convolution): CUTLASS sm90 implicit-GEMM convolution
    (bindings/cuda/conv_implicit.cuh): cluster shape (CUTLASS has one sm90 conv kernel
    schedule, the non-persistent warp-specialized one) and, for bwd_weight, `split`: the
    batch split into that many concurrent CUTLASS launches with fp32 partials.
    algorithm `direct` (convolution): our own direct kernels (bindings/cuda/conv_direct.cuh),
    specialised for `channels_per_group` input = output channels per group (0: any, a
    generic kernel with run-time channel counts). A direct kernel's tile is
    (output pixels per thread, channels per thread, threads per block).
    algorithm `depthwise` (convolution, one channel per group, stride 1, dilation 1, 1D and
    2D): kernels compiled per filter size (bindings/cuda/conv_depthwise.cuh); tile = (output
    rows, output columns, channels per thread).
    algorithm `depthwise_mma` (the same problems, 2D): depthwise on tensor cores, a Toeplitz
    matrix of each filter row as the MMA's B (fwd, bwd_data), a Hankel matrix of each input
    row as its B (bwd_weight) (bindings/cuda/conv_depthwise_mma.cuh); tile = (output rows,
    output columns, channels per block), for bwd_weight (input rows a step, output columns of
    a strip, channels per block). algorithm `toeplitz_mma` with channels_per_group 2
    or 4: the same for grouped convolution (each output channel sums the Toeplitz products
    of its group's inputs)."""

    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"  # cooperative | pingpong
    epilogue: str = "tma"          # tma | nosmem
    pad: bool = False              # misaligned: reject (False) | pad (True)
    algorithm: str = "cutlass"     # cutlass | skinny | direct | depthwise | depthwise_mma | toeplitz_mma | mma | tiled_mma | im2col | implicit
    channels_per_group: int = 0    # direct: 0 (any) or 1, 2, 4, 8, 16; mma: 2, 4, 8, 16, 32; tiled_mma: 1, 2, 4, 8, 16
    split: int = 1                 # implicit bwd_weight: batch slices (1, 2, 4, 8)
    promote: int = 1               # fp8 GEMM: 1 = tile (ours), N = CUTLASS every N MMAs, 0 = fast (never)

    SCHEDULES = {"cooperative": "coop", "pingpong": "pp"}
    EPILOGUES = ("tma", "nosmem")
    ALGORITHMS = ("cutlass", "skinny", "direct", "depthwise", "depthwise_mma", "toeplitz_mma", "mma", "tiled_mma",
                  "im2col", "implicit")
    TOEPLITZ_CPG = (2, 4)
    DIRECT_CPG = (0, 1, 2, 4, 8, 16)
    MMA_CPG = (2, 4, 8, 16, 32)
    TILED_MMA_CPG = (1, 2, 4, 8, 16)
    YAML_KEYS = ("algorithm", "channels_per_group", "cluster", "schedule", "epilogue", "misaligned", "split",
                 "promote")
    SPLITS = (1, 2, 4, 8)
    PROMOTES = (0, 1, 4, 8, 12, 16, 24, 32)

    def __post_init__(self):
        if self.schedule not in self.SCHEDULES:
            raise ValueError(f"unknown schedule '{self.schedule}' (expected cooperative or pingpong)")
        if self.epilogue not in self.EPILOGUES:
            raise ValueError(f"unknown epilogue '{self.epilogue}' (expected tma or nosmem)")
        if self.algorithm not in self.ALGORITHMS:
            raise ValueError(f"unknown algorithm '{self.algorithm}' (expected cutlass, skinny, direct, depthwise, "
                             "depthwise_mma, toeplitz_mma, mma, tiled_mma, im2col or implicit)")
        if self.algorithm == "direct" and self.channels_per_group not in self.DIRECT_CPG:
            raise ValueError(f"channels_per_group {self.channels_per_group} not one of 1, 2, 4, 8, 16 or any")
        if self.algorithm == "mma" and self.channels_per_group not in self.MMA_CPG:
            raise ValueError(f"channels_per_group {self.channels_per_group} not one of 2, 4, 8, 16, 32 (mma)")
        if self.algorithm == "toeplitz_mma" and self.channels_per_group not in self.TOEPLITZ_CPG:
            raise ValueError(f"channels_per_group {self.channels_per_group} not one of 2, 4 (toeplitz_mma)")
        if self.algorithm == "tiled_mma" and self.channels_per_group not in self.TILED_MMA_CPG:
            raise ValueError(f"channels_per_group {self.channels_per_group} not one of 1, 2, 4, 8, 16 (tiled_mma)")
        if self.split not in self.SPLITS:
            raise ValueError(f"split {self.split!r} not one of 1, 2, 4, 8")
        if self.split != 1 and self.algorithm != "implicit":
            raise ValueError("split applies only to algorithm implicit")
        if self.promote not in self.PROMOTES:
            raise ValueError(f"promote {self.promote!r} not one of tile, 4, 8, 12, 16, 24, 32 or fast")
        if self.promote != 1 and self.algorithm != "cutlass":
            raise ValueError("promote applies only to fp8 GEMM (algorithm cutlass)")

    @classmethod
    def from_yaml(cls, values: dict) -> "CudaKnobs":
        algorithm = values.get("algorithm", "cutlass")
        if algorithm == "skinny":
            extra = set(values) - {"algorithm"}
            if extra:
                raise ValueError(f"the skinny algorithm takes no {', '.join(sorted(extra))} (its knobs are the tile)")
            return cls(algorithm=algorithm)
        if algorithm in ("depthwise", "depthwise_mma"):
            extra = set(values) - {"algorithm"}
            if extra:
                raise ValueError(f"the {algorithm} algorithm takes no {', '.join(sorted(extra))} (it is one channel "
                                 "per group by definition)")
            return cls(algorithm=algorithm)
        if algorithm in ("direct", "mma", "tiled_mma", "toeplitz_mma"):
            extra = set(values) - {"algorithm", "channels_per_group"}
            if extra:
                raise ValueError(f"the {algorithm} algorithm takes no {', '.join(sorted(extra))}")
            cpg = values.get("channels_per_group", "any")
            if cpg == "any" and algorithm == "direct":
                cpg = 0
            elif not isinstance(cpg, int) or cpg == 0:
                raise ValueError(f"channels_per_group must be 1, 2, 4, 8, 16 or any, got {cpg!r}")
            return cls(algorithm=algorithm, channels_per_group=cpg)
        if "channels_per_group" in values:
            raise ValueError("channels_per_group applies only to algorithm direct")
        cluster = values.get("cluster", (1, 1))
        misaligned = values.get("misaligned", "reject")
        if misaligned not in ("reject", "pad"):
            raise ValueError(f"unknown misaligned '{misaligned}' (expected reject or pad)")
        if algorithm == "im2col" and (values.get("epilogue", "tma") != "tma" or misaligned != "reject"):
            raise ValueError("algorithm im2col takes cluster and schedule only")
        if algorithm == "implicit" and set(values) - {"algorithm", "cluster", "split"}:
            raise ValueError("algorithm implicit takes cluster and split only (CUTLASS's sm90 convolution has one "
                             "kernel schedule)")
        if "split" in values and algorithm != "implicit":
            raise ValueError("split applies only to algorithm implicit")
        raw = values.get("promote", "tile")
        if isinstance(raw, str) and raw in ("tile", "fast"):
            promote = 1 if raw == "tile" else 0
        elif isinstance(raw, int) and not isinstance(raw, bool) and raw > 1:
            promote = raw  # the allowed intervals: __post_init__
        else:
            raise ValueError(f"promote must be tile, 4, 8, 12, 16, 24, 32 or fast, got {raw!r}")
        return cls(cluster[0], cluster[1], values.get("schedule", "cooperative"),
                   values.get("epilogue", "tma"), misaligned == "pad", algorithm, split=values.get("split", 1),
                   promote=promote)

    @property
    def token(self) -> str:
        if self.algorithm == "skinny":
            return "skinny"
        if self.algorithm == "depthwise":
            return "dw"
        if self.algorithm == "depthwise_mma":
            return "dwmma"
        if self.algorithm == "toeplitz_mma":
            return f"tpmma_cpg{self.channels_per_group}"
        if self.algorithm == "direct":
            return "direct_" + (f"cpg{self.channels_per_group}" if self.channels_per_group else "anycpg")
        if self.algorithm == "mma":
            return f"mma_cpg{self.channels_per_group}"
        if self.algorithm == "tiled_mma":
            return f"tiledmma_cpg{self.channels_per_group}"
        if self.algorithm == "im2col":
            return f"im2col_c{self.cluster_m}x{self.cluster_n}_{self.SCHEDULES[self.schedule]}"
        if self.algorithm == "implicit":
            return f"implicit_c{self.cluster_m}x{self.cluster_n}" + (f"_s{self.split}" if self.split > 1 else "")
        parts = [f"c{self.cluster_m}x{self.cluster_n}", self.SCHEDULES[self.schedule]]
        if self.epilogue != "tma":
            parts.append(self.epilogue)
        if self.pad:
            parts.append("pad")
        if self.promote != 1:
            parts.append(f"p{self.promote}" if self.promote else "fastacc")
        return "_".join(parts)

    @classmethod
    def from_token(cls, token: str) -> "CudaKnobs":
        if token == "skinny":
            return cls(algorithm="skinny")
        if token == "dw":
            return cls(algorithm="depthwise")
        if token == "dwmma":
            return cls(algorithm="depthwise_mma")
        toeplitz = re.fullmatch(r"tpmma_cpg(\d+)", token)
        if toeplitz:
            return cls(algorithm="toeplitz_mma", channels_per_group=int(toeplitz.group(1)))
        direct = re.fullmatch(r"direct_(?:cpg(\d+)|anycpg)", token)
        if direct:
            return cls(algorithm="direct", channels_per_group=int(direct.group(1) or 0))
        mma = re.fullmatch(r"(tiled)?mma_cpg(\d+)", token)
        if mma:
            return cls(algorithm="tiled_mma" if mma.group(1) else "mma", channels_per_group=int(mma.group(2)))
        im2col = re.fullmatch(r"im2col_c(\d+)x(\d+)_(coop|pp)", token)
        if im2col:
            schedule = {v: k for k, v in cls.SCHEDULES.items()}[im2col.group(3)]
            return cls(int(im2col.group(1)), int(im2col.group(2)), schedule, algorithm="im2col")
        implicit = re.fullmatch(r"implicit_c(\d+)x(\d+)(?:_s(\d+))?", token)
        if implicit:
            return cls(int(implicit.group(1)), int(implicit.group(2)), algorithm="implicit",
                       split=int(implicit.group(3) or 1))
        match = re.fullmatch(r"c(\d+)x(\d+)_(coop|pp)(_nosmem)?(_pad)?(?:_p(\d+)|(_fastacc))?", token)
        if not match:
            raise ValueError(f"bad cuda knob token '{token}'")
        schedule = {v: k for k, v in cls.SCHEDULES.items()}[match.group(3)]
        promote = 0 if match.group(7) else int(match.group(6) or 1)
        return cls(int(match.group(1)), int(match.group(2)), schedule,
                   "nosmem" if match.group(4) else "tma", bool(match.group(5)), promote=promote)

    def problems(self, op: str, dtype: "DType", layout, variant, tile, target) -> list[str]:
        """Why this variant cannot be built (empty: it can)."""
        if target != "sm_90a":
            return [f"the cuda backend builds kernels for sm_90a only, not {target}"]
        if op == "conv":
            return self._direct_problems(dtype, variant, tile, layout)
        return self._gemm_problems(dtype, layout, variant, tile)

    def _direct_problems(self, dtype, direction, tile, layout=None) -> list[str]:
        if self.algorithm == "depthwise":
            return self._depthwise_problems(dtype, direction, tile, layout)
        if self.algorithm in ("depthwise_mma", "toeplitz_mma"):
            return self._depthwise_mma_problems(dtype, direction, tile, layout)
        if self.algorithm == "mma":
            return self._mma_problems(dtype, direction, tile)
        if self.algorithm == "tiled_mma":
            return self._tiled_mma_problems(dtype, tile)
        if self.algorithm in ("im2col", "implicit") and dtype not in (DType.FP16, DType.BF16):
            return [f"{self.algorithm} convolution takes fp16 or bf16, not {dtype.key}"]
        if self.algorithm == "im2col":  # dense conv through a CUTLASS GEMM: the GEMM's rules
            layout = Layout.CRR if direction is Direction.BWD_WEIGHT else Layout.RCR
            return self._gemm_problems(dtype, layout, GemmVariant.STANDARD, tile, check_algorithm=False)
        if self.algorithm == "implicit":  # CUTLASS's one sm90 conv schedule: one consumer warp group
            tm, tn, _ = tile
            out = self._cutlass_tile_problems(dtype, tile)
            if tm not in (64, 128, 256):
                out.append(f"implicit conv tile M {tm} not one of 64, 128, 256")
            if tm * tn > 128 * 128:  # ptxas serializes wgmma beyond that (warning C7511)
                out.append(f"implicit conv tile {tm}x{tn} holds too many accumulators for its one consumer warp group")
            if self.split > 1 and direction is not Direction.BWD_WEIGHT:
                out.append("split (a batch split with fp32 partials) applies to bwd_weight only")
            return out
        if self.algorithm != "direct":
            return ["convolution on the cuda backend uses algorithm direct, depthwise, depthwise_mma, toeplitz_mma, mma, "
                    "tiled_mma, im2col or implicit"]
        out = []
        pixels, chans, threads = tile
        cpg = self.channels_per_group
        if dtype not in (DType.FP16, DType.BF16):
            out.append(f"direct convolution kernels take fp16 or bf16, not {dtype.key}")
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

    def _mma_problems(self, dtype, direction, tile) -> list[str]:
        """Tensor-core grouped conv (bindings/cuda/conv_mma.cuh): tile = (16 x PM pixels per
        warp, 8 x ceil(cpg / 8) channels per warp, 16)."""
        out = []
        cpg = self.channels_per_group
        if dtype not in (DType.FP16, DType.BF16):
            out.append(f"mma convolution kernels take fp16 or bf16, not {dtype.key}")
        if direction is Direction.BWD_WEIGHT:
            out.append("the mma kernels compute fwd and bwd_data (bwd_weight: algorithm direct)")
        want = (None, 8 * ((cpg + 7) // 8), 16)
        if tile[0] not in (16, 32, 64) or tile[1:] != want[1:]:
            out.append(f"mma tile must be [16|32|64, {want[1]}, 16] for {cpg} channels per group, not {list(tile)}")
        return out

    def _tiled_mma_problems(self, dtype, tile) -> list[str]:
        """Tensor-core grouped conv from shared-memory tiles (bindings/cuda/conv_mma_tiled.cuh):
        tile = (output pixels per block, 16 or 32 channels per block, 16 = the MMA's K); every direction."""
        out = []
        if dtype not in (DType.FP16, DType.BF16):
            out.append(f"tiled_mma convolution kernels take fp16 or bf16, not {dtype.key}")
        if tile[0] not in (64, 128, 256, 512) or tile[1] not in (16, 32) or tile[2] != 16:
            out.append(f"tiled_mma tile must be [64|128|256|512, 16|32, 16] (pixels per block, channels per block, "
                       f"MMA K), not {list(tile)}")
        return out

    def _depthwise_problems(self, dtype, direction, tile, layout) -> list[str]:
        """Depthwise kernels (bindings/cuda/conv_depthwise.cuh): tile = (output rows 1..4,
        output columns 1..8, 2, 4 or 8 channels per thread); 1D (rows 1) and 2D layouts.
        The sliding kernels (2D; 1, 2 or 4 channels per thread) walk segments of at least
        `rows` output rows: bwd_weight from rows 2 (rows 1 walks rows one at a time), fwd
        and bwd_data from rows 5 (rows 1..4: output rows per thread)."""
        out = []
        rows, cols, chans = tile
        slide = rows > 1 if direction is Direction.BWD_WEIGHT else rows > 4
        if dtype not in (DType.FP16, DType.BF16):
            out.append(f"depthwise convolution kernels take fp16 or bf16, not {dtype.key}")
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

    @staticmethod
    def _dw_wgrad_ring_bytes(tile) -> int:
        """Shared memory of the depthwise bwd_weight kernel's rings (DwWgradRing in
        bindings/cuda/conv_depthwise_mma.cuh: 3 x slots and 8 / rows + 3 dy slots, each
        aligned to 8 pixels; 2 steps ahead)."""
        rows, cols, chans = tile
        pixel = 2 * chans
        align = 8 * pixel

        def slot(width):
            return (rows * width * pixel + align - 1) // align * align
        return 3 * slot(cols + 7) + (8 // rows + 3) * slot(cols + 1) + 24

    def _depthwise_mma_problems(self, dtype, direction, tile, layout) -> list[str]:
        """Toeplitz tensor-core kernels (bindings/cuda/conv_depthwise_mma.cuh; depthwise_mma
        and toeplitz_mma): tile = (16 or 32 output rows, 16, 32 or 64 output columns, 8, 16,
        32 or 64 channels per block); 2D; depthwise_mma every direction, toeplitz_mma fwd and
        bwd_data."""
        out = []
        name = self.algorithm
        if dtype not in (DType.FP16, DType.BF16):
            out.append(f"{name} convolution kernels take fp16 or bf16, not {dtype.key}")
        if layout is not None and layout.ndim != 2:
            out.append(f"the {name} kernels take the 2D layout only")
        if direction is Direction.BWD_WEIGHT and name == "toeplitz_mma":
            out.append(f"the {name} kernels compute fwd and bwd_data (bwd_weight: algorithm depthwise or tiled_mma)")
        if direction is Direction.BWD_WEIGHT:
            if tile[0] not in (4, 8) or tile[1] not in (16, 32, 64) or tile[2] not in (16, 32, 64):
                out.append(f"{name} bwd_weight tile must be [4|8 input rows a step, 16|32|64 columns, "
                           f"16|32|64 channels], not {list(tile)}")
            elif self._dw_wgrad_ring_bytes(tile) > 227 * 1024:
                out.append(f"{name} bwd_weight tile {list(tile)}: its TMA rings need "
                           f"{self._dw_wgrad_ring_bytes(tile) / 1024:.0f} KB of shared memory, more than 227 KB")
        elif tile[0] not in (16, 32) or tile[1] not in (16, 32, 64) or tile[2] not in (8, 16, 32, 64):
            out.append(f"{name} tile must be [16|32 rows, 16|32|64 columns, 8|16|32|64 channels], "
                       f"not {list(tile)}")
        return out

    def _cutlass_tile_problems(self, dtype, tile) -> list[str]:
        """The rules every CUTLASS sm90 kernel shares: cluster sides, tile N, tile K."""
        out = []
        _, tn, tk = tile
        if self.cluster_m not in (1, 2) or self.cluster_n not in (1, 2):
            out.append(f"cluster {self.cluster_m}x{self.cluster_n}: each side must be 1 or 2")
        if tn % 16 or not 16 <= tn <= 256:
            out.append(f"tile N {tn} must be a multiple of 16 in 16..256")
        want_k = (128,) if dtype.nbytes == 1 else (64, 128)
        if tk not in want_k:
            out.append(f"tile K must be {' or '.join(map(str, want_k))} for {dtype.key} "
                       f"(128-byte rows of shared memory)")
        return out

    @staticmethod
    def _skinny_problems(dtype, layout, variant, tile) -> list[str]:
        """Our decode-shape GEMM (bindings/cuda/gemm_skinny.cuh): tile = (rows of A a block,
        rows of B a block, k of one block step = warps x the warp step's 32 (16-bit) or 64
        (fp8) elements)."""
        out = []
        tm, tn, tk = tile
        if dtype not in (DType.FP16, DType.BF16, DType.FP8_E4M3, DType.FP8_E5M2):
            out.append(f"the skinny GEMM takes fp16, bf16, fp8_e4m3 or fp8_e5m2, not {dtype.key}")
        if layout is not Layout.RCR:
            out.append("the skinny GEMM reads K-contiguous rows of A and B: layout rcr only")
        if variant is not GemmVariant.STANDARD:
            out.append("the skinny GEMM has its own split-K (run time): variant standard")
        warp_k = 64 if dtype.nbytes == 1 else 32
        if tm not in (8, 16, 32, 64) or tn not in (16, 32) or tk % warp_k or tk // warp_k not in (1, 2, 4, 8, 16):
            out.append(f"skinny tile must be [8|16|32|64, 16|32, {warp_k} x 1|2|4|8|16 warps], not {list(tile)}")
        elif (tn // 16) * (tm // 8) > 8:
            out.append(f"skinny tile {tm}x{tn} holds more than 32 accumulators a thread")
        return out

    def _gemm_problems(self, dtype, layout, variant, tile, check_algorithm=True) -> list[str]:
        """The sm90 CUTLASS rules."""
        out = []
        tm, tn, tk = tile
        if check_algorithm and self.algorithm == "skinny":
            return self._skinny_problems(dtype, layout, variant, tile)
        if check_algorithm and self.algorithm != "cutlass":
            return ["GEMM on the cuda backend uses algorithm cutlass or skinny"]
        if dtype is DType.FP32:
            out.append("fp32 inputs are not built on the cuda backend (use fp16, bf16 or fp8)")
        if dtype in FNUZ:
            out.append(f"{dtype.key} (FNUZ) is built for gfx942 only; NVIDIA fp8 is OCP (fp8_e4m3, fp8_e5m2)")
        if dtype in (DType.FP8_E4M3, DType.FP8_E5M2) and layout is not Layout.RCR:
            out.append("fp8 wgmma needs K-major A and B: layout rcr only")
        out += self._cutlass_tile_problems(dtype, tile)
        if variant is GemmVariant.STREAM_K and self.schedule != "cooperative":
            out.append("CUTLASS runs stream-K only with the cooperative schedule")
        if variant is GemmVariant.SPLIT_K and dtype not in (DType.FP16, DType.BF16):
            out.append(f"split_k is built for fp16 and bf16 (fp32 partials), not {dtype.key}")
        if variant is GemmVariant.SPLIT_K and self.pad:
            out.append("split_k reads its operands in place: misaligned reject only (a pad variant serves the rest)")
        if self.schedule == "cooperative" and tm not in (128, 256):
            out.append(f"the cooperative schedule needs tile M 128 or 256, not {tm}")
        # A ping-pong warp group holds the whole tile: 128x192 is 192 fp32 accumulators a
        # thread, compiled without spills (eighteenth session); 128x256 would not fit.
        if self.schedule == "pingpong" and tm != 64 and tm * tn > 128 * 192:
            out.append(f"ping-pong tile {tm}x{tn} holds too many accumulators per warp group")
        if self.schedule == "pingpong" and tm not in (64, 128):
            out.append(f"the ping-pong schedule needs tile M 64 or 128, not {tm}")
        if (tm + tn) * tk * dtype.nbytes > 96 * 1024:
            out.append(f"tile {tm}x{tn}x{tk} needs more than 96 KiB of shared memory per stage")
        if self.promote == 1 and dtype in (DType.FP8_E4M3, DType.FP8_E5M2) and not fp8_tile_slices(tile, self.schedule):
            out.append(f"fp8 tile {tm}x{tn} with promote tile: no N slicing leaves room for the two partial sets "
                       f"(bindings/cuda/fp8_mainloop.cuh)")
        if self.promote != 1 and dtype not in (DType.FP8_E4M3, DType.FP8_E5M2):
            out.append(f"promote applies to fp8 only ({dtype.key} MMAs accumulate in fp32)")
        elif self.promote > 1 and self.promote % max(1, tk // 32):
            out.append(f"promote {self.promote} must be a multiple of the {tk // 32} MMAs of one K tile of {tk}")
        return out


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


# --------------------------------------------------------------------------- hip knobs

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


@dataclass(frozen=True)
class HipKnobs:
    """hip backend knobs (our MFMA kernels in bindings/hip/), as in CK Tile: wave shape
    (waves per block along M, N, K), warp tile (the MFMA instruction shape), pipeline
    (mem: one LDS buffer; compv3: two, the next K tile loaded while this one computes),
    scheduler (intrawave; interwave: raised wave priority around the MFMA block) and
    padding (pad: any size, bounds-checked; nopad: sizes multiples of the tile)."""

    wave_m: int = 2
    wave_n: int = 2
    wave_k: int = 1
    warp_m: int = 32
    warp_n: int = 32
    warp_k: int = 8
    pipeline: str = "compv3"
    scheduler: str = "intrawave"
    pad: bool = True

    PIPELINES = ("mem", "compv3")
    SCHEDULERS = ("intrawave", "interwave")
    YAML_KEYS = ("wave_shape", "warp_tile", "pipeline", "scheduler", "padding")

    def __post_init__(self):
        if self.pipeline not in self.PIPELINES:
            raise ValueError(f"unknown pipeline '{self.pipeline}' (expected mem or compv3)")
        if self.scheduler not in self.SCHEDULERS:
            raise ValueError(f"unknown scheduler '{self.scheduler}' (expected intrawave or interwave)")

    @classmethod
    def from_yaml(cls, values: dict) -> "HipKnobs":
        waves = values.get("wave_shape", (2, 2, 1))
        warp = values.get("warp_tile", (32, 32, 8))
        padding = values.get("padding", "pad")
        if padding not in ("pad", "nopad"):
            raise ValueError(f"unknown padding '{padding}' (expected pad or nopad)")
        return cls(*waves, *warp, values.get("pipeline", "compv3"), values.get("scheduler", "intrawave"),
                   padding == "pad")

    @property
    def waves(self):
        return (self.wave_m, self.wave_n, self.wave_k)

    @property
    def warp(self):
        return (self.warp_m, self.warp_n, self.warp_k)

    @property
    def token(self) -> str:
        return (f"w{self.wave_m}x{self.wave_n}x{self.wave_k}_m{self.warp_m}x{self.warp_n}x{self.warp_k}_"
                f"{self.pipeline}_{self.scheduler}_{'pad' if self.pad else 'nopad'}")

    @classmethod
    def from_token(cls, token: str) -> "HipKnobs":
        match = re.fullmatch(r"w(\d+)x(\d+)x(\d+)_m(\d+)x(\d+)x(\d+)_(mem|compv3)_(intrawave|interwave)_(pad|nopad)",
                             token)
        if not match:
            raise ValueError(f"bad hip knob token '{token}'")
        nums = [int(v) for v in match.groups()[:6]]
        return cls(*nums, match.group(7), match.group(8), match.group(9) == "pad")

    def problems(self, op: str, dtype: "DType", layout, variant, tile, target) -> list[str]:
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
        if op == "conv" and variant is not None and tk < 8:
            out.append("conv tiles need K >= 8")
        return out


FNUZ = (DType.FP8_E4M3_FNUZ, DType.FP8_E5M2_FNUZ)

KNOBS_BY_BACKEND = {Backend.CPU: CpuKnobs, Backend.CUDA: CudaKnobs, Backend.HIP: HipKnobs}


def _tile_token(tile) -> str:
    return "x".join(str(v) for v in tile)


def _tile_from_token(token: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)", token)
    if not match:
        raise ValueError(f"bad tile token '{token}'")
    return tuple(int(g) for g in match.groups())


def _coerce(obj, name, parser):
    value = getattr(obj, name)
    if isinstance(value, str):
        object.__setattr__(obj, name, parser(value))


# --------------------------------------------------------------------------- configs

@dataclass(frozen=True)
class GemmKernelConfig:
    """One GEMM kernel variant. Strings are accepted for the enum fields."""

    dtype: DType = DType.FP32
    layout: Layout = Layout.RCR
    variant: GemmVariant = GemmVariant.STANDARD
    reduction: Reduction | None = None
    tile: tuple[int, int, int] = (128, 128, 256)
    knobs: object = None  # CpuKnobs / CudaKnobs; None: the backend's defaults
    target: str = "cpu"

    op = "gemm"

    def __post_init__(self):
        if self.knobs is None:
            object.__setattr__(self, "knobs", KNOBS_BY_BACKEND[backend_of(self.target)]())
        _coerce(self, "dtype", DType.parse)
        _coerce(self, "layout", Layout.parse)
        _coerce(self, "variant", GemmVariant.parse)
        _coerce(self, "reduction", Reduction.parse)
        object.__setattr__(self, "tile", tuple(int(v) for v in self.tile))
        check_target(self.target)
        if self.variant is GemmVariant.STREAM_K and self.reduction is None:
            raise ValueError("variant stream_k needs a reduction (atomic or deterministic)")
        if self.variant is not GemmVariant.STREAM_K and self.reduction is not None:
            raise ValueError("reduction applies only to variant stream_k")

    @property
    def backend(self) -> Backend:
        return backend_of(self.target)

    @property
    def named_only(self) -> bool:
        """Never picked, run only when named (KernelInfo.named_only in C): fp8 fast
        accumulation, a less precise contract than the other kernels'."""
        return getattr(self.knobs, "promote", 1) == 0

    @property
    def variant_token(self) -> str:
        if self.variant is GemmVariant.STANDARD:
            return "standard"
        if self.variant is GemmVariant.SPLIT_K:
            return "splitk"
        return f"streamk_{self.reduction.key}"

    @property
    def name(self) -> str:
        return "_".join([
            "gemm", self.dtype.token, self.layout.token, self.variant_token,
            _tile_token(self.tile), self.knobs.token, target_token(self.target)])

    @classmethod
    def from_name(cls, name: str) -> "GemmKernelConfig":
        parts = name.split("_")
        try:
            if parts[0] != "gemm":
                raise ValueError("not a gemm kernel")
            dtype, layout = DType.parse(parts[1]), Layout.parse(parts[2])
            if parts[3] == "standard":
                variant, reduction, rest = GemmVariant.STANDARD, None, parts[4:]
            elif parts[3] == "splitk":
                variant, reduction, rest = GemmVariant.SPLIT_K, None, parts[4:]
            elif parts[3] == "streamk":
                variant, reduction, rest = GemmVariant.STREAM_K, Reduction.parse(parts[4]), parts[5:]
            else:
                raise ValueError(f"unknown variant token '{parts[3]}'")
            tile = _tile_from_token(rest[0])
            target = target_from_token(rest[-1])
            knob_cls = KNOBS_BY_BACKEND[backend_of(target)]
            knobs = knob_cls.from_token("_".join(rest[1:-1]))
        except (IndexError, KeyError, ValueError) as err:
            raise ValueError(f"'{name}' is not a gemm kernel name: {err}") from None
        config = cls(dtype, layout, variant, reduction, tile, knobs, target)
        if config.name != name:
            raise ValueError(f"'{name}' is not a canonical kernel name (did you mean {config.name}?)")
        return config

    def to_dict(self) -> dict:
        return {
            "name": self.name, "op": self.op, "target": self.target,
            "backend": self.backend.key, "dtype": self.dtype.key, "out_dtype": self.dtype.out.key,
            "layout": self.layout.key, "variant": self.variant.key,
            "reduction": self.reduction.key if self.reduction else None,
            "tile": list(self.tile), "knobs": knobs_dict(self.knobs),
        }


def knobs_dict(knobs) -> dict:
    if isinstance(knobs, CpuKnobs):
        return {"micro_tile": [knobs.micro_m, knobs.micro_n]}
    if isinstance(knobs, HipKnobs):
        return {"wave_shape": list(knobs.waves), "warp_tile": list(knobs.warp), "pipeline": knobs.pipeline,
                "scheduler": knobs.scheduler, "padding": "pad" if knobs.pad else "nopad"}
    if knobs.algorithm == "im2col":
        return {"algorithm": "im2col", "cluster": [knobs.cluster_m, knobs.cluster_n], "schedule": knobs.schedule}
    if knobs.algorithm == "implicit":
        return {"algorithm": "implicit", "cluster": [knobs.cluster_m, knobs.cluster_n],
                **({"split": knobs.split} if knobs.split > 1 else {})}
    if knobs.algorithm in ("depthwise", "depthwise_mma", "skinny"):
        return {"algorithm": knobs.algorithm}
    if knobs.algorithm in ("direct", "mma", "tiled_mma", "toeplitz_mma"):
        return {"algorithm": knobs.algorithm, "channels_per_group": knobs.channels_per_group or "any"}
    return {"cluster": [knobs.cluster_m, knobs.cluster_n], "schedule": knobs.schedule,
            "epilogue": knobs.epilogue, "misaligned": "pad" if knobs.pad else "reject"}


@dataclass(frozen=True)
class ConvKernelConfig:
    """One grouped-convolution kernel variant (implicit GEMM)."""

    direction: Direction = Direction.FWD
    layout: ConvLayout = ConvLayout.NHWGC
    dtype: DType = DType.FP32
    tile: tuple[int, int, int] = (64, 64, 64)
    knobs: object = None  # None: the backend's defaults (cpu: micro tile 4 x 16)
    target: str = "cpu"

    op = "conv"

    def __post_init__(self):
        if self.knobs is None:
            backend = backend_of(self.target)
            object.__setattr__(self, "knobs", CpuKnobs(4, 16) if backend is Backend.CPU
                               else KNOBS_BY_BACKEND[backend]())
        _coerce(self, "direction", Direction.parse)
        _coerce(self, "layout", ConvLayout.parse)
        _coerce(self, "dtype", DType.parse)
        object.__setattr__(self, "tile", tuple(int(v) for v in self.tile))
        check_target(self.target)

    @property
    def ndim(self) -> int:
        return self.layout.ndim

    @property
    def backend(self) -> Backend:
        return backend_of(self.target)

    @property
    def name(self) -> str:
        return "_".join([
            "conv", self.direction.token, self.layout.token, self.dtype.token,
            _tile_token(self.tile), self.knobs.token, target_token(self.target)])

    @classmethod
    def from_name(cls, name: str) -> "ConvKernelConfig":
        parts = name.split("_")
        try:
            if parts[0] != "conv":
                raise ValueError("not a conv kernel")
            direction = Direction.parse(parts[1])
            layout = ConvLayout.parse(parts[2].upper())
            dtype = DType.parse(parts[3])
            tile = _tile_from_token(parts[4])
            target = target_from_token(parts[-1])
            knobs = KNOBS_BY_BACKEND[backend_of(target)].from_token("_".join(parts[5:-1]))
        except (IndexError, KeyError, ValueError) as err:
            raise ValueError(f"'{name}' is not a conv kernel name: {err}") from None
        config = cls(direction, layout, dtype, tile, knobs, target)
        if config.name != name:
            raise ValueError(f"'{name}' is not a canonical kernel name (did you mean {config.name}?)")
        return config

    def to_dict(self) -> dict:
        return {
            "name": self.name, "op": self.op, "target": self.target,
            "backend": self.backend.key, "direction": self.direction.key, "ndim": self.ndim,
            "layout": {"input": self.layout.input_layout, "weight": self.layout.weight_layout,
                       "output": self.layout.output_layout},
            "dtype": self.dtype.key, "out_dtype": self.dtype.out.key, "tile": list(self.tile),
            "knobs": knobs_dict(self.knobs),
        }


CONFIG_BY_OP = {"gemm": GemmKernelConfig, "conv": ConvKernelConfig}


def config_from_name(name: str):
    """Parse any kernel name into its config."""
    op = name.split("_", 1)[0]
    if op not in CONFIG_BY_OP:
        raise ValueError(f"'{name}' is not a kernel name: unknown op '{op}'")
    return CONFIG_BY_OP[op].from_name(name)
