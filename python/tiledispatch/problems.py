"""Problem descriptions, turned into the C ABI's structs."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _ffi
from .codegen import Activation, Bias, Direction, DType, Layout, OutDType
from .codegen.model import coerce as _coerce
from .errors import InvalidArgumentError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _integer(value, what: str, low: int, high: int) -> int:
    """value as a Python int: a Python or numpy integer (not bool, not a float) within
    [low, high] (the C field's range), else InvalidArgumentError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if not low <= value <= high:
        raise InvalidArgumentError(f"{what} = {value} is out of range (must be in [{low}, {high}])")
    return value


@dataclass(frozen=True)
class GemmProblem:
    """C (M x N) = alpha * A (M x K) * B (K x N). Leading dims in elements; 0 = packed."""

    M: int
    N: int
    K: int
    dtype: DType = DType.FP32
    layout: Layout = Layout.RCR
    lda: int = 0
    ldb: int = 0
    ldc: int = 0
    alpha: float = 1.0
    splits: int = 0
    raster: int = 0   # cuda: 0 heuristic, 1 along M, 2 along N
    swizzle: int = 0  # cuda: 0 default, or 1, 2, 4, 8
    # D = act(alpha * (A B) * row_scale * col_scale + beta * C + bias) (docs/abi.md); the
    # defaults are the plain product. Batch strides in elements; 0 broadcasts A or B.
    batch: int = 0
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0
    beta: float = 0.0
    bias: Bias = Bias.NONE
    activation: Activation = Activation.NONE
    aux: bool = False
    row_scale: bool = False
    col_scale: bool = False
    block_scale: bool = False
    out_dtype: OutDType = OutDType.DEFAULT

    def __post_init__(self):
        _coerce(self, "dtype", DType.parse)
        _coerce(self, "layout", Layout.parse)
        for name, parse in (("bias", Bias.parse), ("activation", Activation.parse), ("out_dtype", OutDType.parse)):
            try:
                _coerce(self, name, parse)
            except ValueError as err:
                raise InvalidArgumentError(str(err)) from None
        for name, kind in (("bias", Bias), ("activation", Activation), ("out_dtype", OutDType)):
            if not isinstance(getattr(self, name), kind):
                raise InvalidArgumentError(f"unknown {name} {getattr(self, name)!r}")
        for name in ("batch", "stride_a", "stride_b", "stride_c"):
            object.__setattr__(self, name, _integer(getattr(self, name), name, 0, INT64_MAX))
        for name in ("aux", "row_scale", "col_scale", "block_scale"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise InvalidArgumentError(f"{name} must be True or False, got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        object.__setattr__(self, "beta", _alpha(self.beta, "beta"))
        if not isinstance(self.dtype, DType) or not isinstance(self.layout, Layout):
            raise InvalidArgumentError(f"unknown dtype {self.dtype!r} or layout {self.layout!r}")
        # the C struct's fields: int64 sizes and leading dims, int32 knobs
        for name in ("M", "N", "K", "lda", "ldb", "ldc"):
            object.__setattr__(self, name, _integer(getattr(self, name), name, -INT64_MAX - 1, INT64_MAX))
        if min(self.M, self.N, self.K) < 1:
            raise InvalidArgumentError(f"M, N and K must be positive (got M={self.M} N={self.N} K={self.K})")
        for name in ("lda", "ldb", "ldc"):
            _integer(getattr(self, name), name, 0, INT64_MAX)
        for name in ("splits", "raster", "swizzle"):
            object.__setattr__(self, name, _integer(getattr(self, name), name, 0, INT32_MAX))
        object.__setattr__(self, "alpha", _alpha(self.alpha))

    @property
    def flops(self) -> int:
        return 2 * max(self.batch, 1) * self.M * self.N * self.K

    @property
    def out(self) -> DType:
        """The element type of D (and of C, aux and the bias)."""
        return self.dtype.out if self.out_dtype is OutDType.DEFAULT else DType.parse(self.out_dtype.dtype_key)

    def required_elements(self) -> tuple:
        """Elements that A, B and C must span (leading dimensions and batch strides included)."""
        a_row, b_row = self.layout.a_row, self.layout.b_row
        lda = self.lda or (self.K if a_row else self.M)
        ldb = self.ldb or (self.N if b_row else self.K)
        ldc = self.ldc or self.N
        a = (self.M - 1) * lda + self.K if a_row else (self.K - 1) * lda + self.M
        b = (self.K - 1) * ldb + self.N if b_row else (self.N - 1) * ldb + self.K
        c = (self.M - 1) * ldc + self.N
        extra = max(self.batch - 1, 0)
        return a + extra * self.stride_a, b + extra * self.stride_b, c + extra * self.stride_c

    def to_c(self) -> _ffi.TdGemmProblem:
        return _ffi.TdGemmProblem(self.M, self.N, self.K, self.dtype.code, self.layout.code,
                                  self.lda, self.ldb, self.ldc, self.alpha, self.splits, self.raster,
                                  self.swizzle, self.batch, self.stride_a, self.stride_b, self.stride_c,
                                  self.beta, self.bias.code, self.activation.code, int(self.aux),
                                  int(self.row_scale), int(self.col_scale), int(self.block_scale),
                                  self.out_dtype.code)


FLOAT32_MAX = 3.4028234663852886e38


def _alpha(value, what: str = "alpha") -> float:
    """alpha (or beta) as the C float it becomes: a finite real number within the float32 range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"{what} must be a real number, got {value!r}")
    try:
        alpha = float(value)
    except OverflowError:
        alpha = math.inf
    if not math.isfinite(alpha) or abs(alpha) > FLOAT32_MAX:
        raise InvalidArgumentError(f"{what} must be finite and within the float32 range, got {value!r}")
    return alpha


def _spatial(value, ndim: int, what: str, low: int = 1) -> tuple:
    """One integer per spatial dim, each within [low, INT32_MAX] (C int fields)."""
    if isinstance(value, (int, np.integer)):
        value = (value,) * ndim
    if isinstance(value, (str, bytes, bytearray, memoryview, dict, set, frozenset)):
        raise InvalidArgumentError(f"{what} must be an integer or a tuple of integers, got {value!r}")
    try:
        value = tuple(value)
    except TypeError:
        raise InvalidArgumentError(f"{what} must be an integer or a tuple of integers, got {value!r}") from None
    if len(value) != ndim:
        raise InvalidArgumentError(f"{what} needs {ndim} values (one per spatial dim), got {len(value)}")
    return tuple(_integer(v, what, low, INT32_MAX) for v in value)


@dataclass(frozen=True)
class ConvProblem:
    """A grouped convolution. C and K are channels per group; sizes are spatial tuples
    (w), (h, w) or (d, h, w). Tensors are channels-last: input (N, *input_size, G*C),
    weight (G*K, *filter_size, C), output (N, *output_size, G*K)."""

    N: int
    G: int
    C: int
    K: int
    input_size: tuple
    filter_size: tuple
    stride: tuple | int = 1
    padding: tuple | int = 0
    dilation: tuple | int = 1
    direction: Direction = Direction.FWD
    dtype: DType = DType.FP32
    split_k: int = 0

    def __post_init__(self):
        _coerce(self, "direction", Direction.parse)
        _coerce(self, "dtype", DType.parse)
        if not isinstance(self.direction, Direction):
            raise InvalidArgumentError(f"unknown direction {self.direction!r} (expected fwd, bwd_data or bwd_weight)")
        if not isinstance(self.dtype, DType):
            raise InvalidArgumentError(f"unknown dtype {self.dtype!r}")
        # every field goes to a C int: sizes, strides and dilations positive, pads non-negative
        for name in ("N", "G", "C", "K"):
            object.__setattr__(self, name, _integer(getattr(self, name), name, 1, INT32_MAX))
        object.__setattr__(self, "split_k", _integer(self.split_k, "split_k", 0, INT32_MAX))
        ndim = len(tuple(self.input_size))
        if ndim not in (1, 2, 3):
            raise ValueError(f"convolution takes 1, 2 or 3 spatial dims, got {ndim}")
        object.__setattr__(self, "input_size", _spatial(self.input_size, ndim, "input_size"))
        object.__setattr__(self, "filter_size", _spatial(self.filter_size, ndim, "filter_size"))
        for name in ("stride", "padding", "dilation"):
            object.__setattr__(self, name, _spatial(getattr(self, name), ndim, name, 0 if name == "padding" else 1))

    @property
    def ndim(self) -> int:
        return len(self.input_size)

    @property
    def output_size(self) -> tuple:
        out = []
        for i, f, s, p, d in zip(self.input_size, self.filter_size, self.stride, self.padding,
                                 self.dilation):
            out.append((i + 2 * p - d * (f - 1) - 1) // s + 1)
        return tuple(out)

    @property
    def input_shape(self) -> tuple:
        return (self.N, *self.input_size, self.G * self.C)

    @property
    def weight_shape(self) -> tuple:
        return (self.G * self.K, *self.filter_size, self.C)

    @property
    def output_shape(self) -> tuple:
        return (self.N, *self.output_size, self.G * self.K)

    @property
    def reduction_length(self) -> int:
        """The K of the implicit GEMM: what one output element sums over."""
        taps = math.prod(self.filter_size)
        if self.direction is Direction.FWD:
            return taps * self.C
        if self.direction is Direction.BWD_DATA:
            return taps * self.K
        return self.N * math.prod(self.output_size)

    @property
    def flops(self) -> int:
        return 2 * self.N * self.G * self.K * self.C * math.prod(self.output_size) * math.prod(self.filter_size)

    def required_elements(self) -> tuple:
        """Elements of input, weight and output."""
        return tuple(math.prod(shape) for shape in (self.input_shape, self.weight_shape, self.output_shape))

    def to_c(self) -> _ffi.TdConvProblem:
        pad3 = lambda values, fill: (fill,) * (3 - self.ndim) + tuple(values)  # noqa: E731
        d, h, w = pad3(self.input_size, 1)
        z, y, x = pad3(self.filter_size, 1)
        sd, sh, sw = pad3(self.stride, 1)
        pd, ph, pw = pad3(self.padding, 0)
        dd, dh, dw = pad3(self.dilation, 1)
        base = _ffi.ConvProblemC(self.N, self.G, self.C, self.K, d, h, w, z, y, x, sd, sh, sw,
                                 pd, ph, pw, dd, dh, dw, self.direction.code, self.split_k)
        return _ffi.TdConvProblem(base, self.ndim, self.dtype.code)
