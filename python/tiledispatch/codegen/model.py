"""The kernel model: enums with their renderings (key, name token, ABI code) and targets.

Kernel configs are in configs.py, the families' knobs in families/.
"""
from __future__ import annotations

import enum
import re

SCHEMA_VERSION = 1
ABI_VERSION = 5


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
    kernel (cuBLAS's split-K; cuda backend); grouped: one launch for a list of GEMMs of their
    own sizes and operands (mixture of experts; CUTLASS's pointer-array grouped GEMM, algorithm
    cutlass_grouped), run by grouped calls only (td_gemm_grouped_run), never by a plain one."""

    STANDARD = ("standard", 0)
    STREAM_K = ("stream_k", 1)
    SPLIT_K = ("split_k", 2)
    GROUPED = ("grouped", 3)

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


class Activation(enum.Enum):
    """The activation of a GEMM epilogue (TdGemmProblem.activation)."""

    NONE = ("none", 0)
    RELU = ("relu", 1)
    GELU = ("gelu", 2)            # x * Phi(x), the erf form
    GELU_TANH = ("gelu_tanh", 3)  # the tanh approximation
    SILU = ("silu", 4)            # x * sigmoid(x)

    def __init__(self, key, code):
        self.key = key
        self.code = code

    @classmethod
    def parse(cls, text: str) -> "Activation":
        return _lookup(cls, text, "activation")


class Bias(enum.Enum):
    """Where a GEMM epilogue's bias vector runs (TdGemmProblem.bias): one value per column
    (length N) or per row (length M)."""

    NONE = ("none", 0)
    N = ("n", 1)
    M = ("m", 2)

    def __init__(self, key, code):
        self.key = key
        self.code = code

    @classmethod
    def parse(cls, text: str) -> "Bias":
        return _lookup(cls, text, "bias direction")


class OutDType(enum.Enum):
    """The element type of a GEMM's D (TdGemmProblem.out_dtype): DEFAULT is the input type's
    (DType.out). The fp8 types are for fp8 inputs only, stored with saturation (satfinite)."""

    DEFAULT = ("default", 0, None)
    FP32 = ("fp32", 1, "fp32")
    FP16 = ("fp16", 2, "fp16")
    BF16 = ("bf16", 3, "bf16")
    FP8_E4M3 = ("fp8_e4m3", 4, "fp8_e4m3")
    FP8_E5M2 = ("fp8_e5m2", 5, "fp8_e5m2")

    @property
    def fp8(self) -> bool:
        return self in (OutDType.FP8_E4M3, OutDType.FP8_E5M2)

    def __init__(self, key, code, dtype_key):
        self.key = key
        self.code = code
        self.dtype_key = dtype_key

    @classmethod
    def parse(cls, text: str) -> "OutDType":
        return _lookup(cls, text, "output dtype")


class Feature(enum.Enum):
    """What a GEMM kernel implements beyond C = alpha * A * B (KernelInfo.features, bits)."""

    BETA = ("beta * C", 1)
    BIAS_N = ("bias along N", 2)
    BIAS_M = ("bias along M", 4)
    ACTIVATION = ("activation", 8)      # every one of Activation
    AUX = ("aux output", 16)
    ROW_SCALE = ("row scale", 32)
    COL_SCALE = ("column scale", 64)
    OUT_DTYPE = ("output dtype", 128)   # fp32, fp16 and bf16 D for any input type (fp8: the kernel says)
    BATCH = ("batch", 256)              # batch > 1 with batch strides
    BLOCK_SCALE = ("block-wise scale", 512)  # fp8 block-wise scales (1x128 A, 128x128 B)

    def __init__(self, key, code):
        self.key = key
        self.code = code


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


FNUZ = (DType.FP8_E4M3_FNUZ, DType.FP8_E5M2_FNUZ)


def tile_token(tile) -> str:
    return "x".join(str(v) for v in tile)


def tile_from_token(token: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)", token)
    if not match:
        raise ValueError(f"bad tile token '{token}'")
    return tuple(int(g) for g in match.groups())


def coerce(obj, name, parser):
    value = getattr(obj, name)
    if isinstance(value, str):
        object.__setattr__(obj, name, parser(value))


