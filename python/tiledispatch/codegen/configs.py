"""Kernel configs: one frozen dataclass per op. A config's `.name` is its identity: every field
that changes the generated code is in it, in a fixed order, `[a-z0-9_]` only, target last;
`from_name` parses a name back, so `Config.from_name(c.name) == c` for every config."""
from __future__ import annotations

from dataclasses import dataclass

from . import families
from .model import (
    Backend, ConvLayout, Direction, DType, GemmVariant, Layout, Reduction, backend_of, check_target,
    coerce, target_from_token, target_token, tile_from_token, tile_token,
)


@dataclass(frozen=True)
class GemmKernelConfig:
    """One GEMM kernel variant. Strings are accepted for the enum fields."""

    dtype: DType = DType.FP32
    layout: Layout = Layout.RCR
    variant: GemmVariant = GemmVariant.STANDARD
    reduction: Reduction | None = None
    tile: tuple[int, int, int] = (128, 128, 256)
    knobs: object = None  # a family's knobs (families/); None: the backend's default family's
    target: str = "cpu"

    op = "gemm"

    def __post_init__(self):
        check_target(self.target)
        if self.knobs is None:
            object.__setattr__(self, "knobs", families.default_knobs(backend_of(self.target), self.op))
        coerce(self, "dtype", DType.parse)
        coerce(self, "layout", Layout.parse)
        coerce(self, "variant", GemmVariant.parse)
        coerce(self, "reduction", Reduction.parse)
        object.__setattr__(self, "tile", tuple(int(v) for v in self.tile))
        if self.variant is GemmVariant.STREAM_K and self.reduction is None:
            raise ValueError("variant stream_k needs a reduction (atomic or deterministic)")
        if self.variant is not GemmVariant.STREAM_K and self.reduction is not None:
            raise ValueError("reduction applies only to variant stream_k")

    @property
    def backend(self) -> Backend:
        return backend_of(self.target)

    @property
    def family(self) -> str:
        return self.knobs.FAMILY

    @property
    def named_only(self) -> bool:
        """Never picked, run only when named (KernelInfo.named_only in C): fp8 fast
        accumulation, a less precise contract than the other kernels'."""
        return getattr(self.knobs, "named_only", False)

    @property
    def variant_token(self) -> str:
        if self.variant is GemmVariant.STANDARD:
            return "standard"
        if self.variant is GemmVariant.SPLIT_K:
            return "splitk"
        if self.variant is GemmVariant.GROUPED:
            return "grouped"
        return f"streamk_{self.reduction.key}"

    @property
    def name(self) -> str:
        return "_".join([
            "gemm", self.dtype.token, self.layout.token, self.variant_token,
            tile_token(self.tile), self.knobs.token, target_token(self.target)])

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
            elif parts[3] == "grouped":
                variant, reduction, rest = GemmVariant.GROUPED, None, parts[4:]
            elif parts[3] == "streamk":
                variant, reduction, rest = GemmVariant.STREAM_K, Reduction.parse(parts[4]), parts[5:]
            else:
                raise ValueError(f"unknown variant token '{parts[3]}'")
            tile = tile_from_token(rest[0])
            target = target_from_token(rest[-1])
            knobs = families.knobs_from_token(backend_of(target), "_".join(rest[1:-1]))
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
            "tile": list(self.tile), "family": self.family, "knobs": self.knobs.to_dict(),
        }


@dataclass(frozen=True)
class ConvKernelConfig:
    """One grouped-convolution kernel variant."""

    direction: Direction = Direction.FWD
    layout: ConvLayout = ConvLayout.NHWGC
    dtype: DType = DType.FP32
    tile: tuple[int, int, int] = (64, 64, 64)
    knobs: object = None  # a family's knobs; None: the backend's default family's (cpu: micro tile 4 x 16)
    target: str = "cpu"

    op = "conv"

    def __post_init__(self):
        check_target(self.target)
        if self.knobs is None:
            object.__setattr__(self, "knobs", families.default_knobs(backend_of(self.target), self.op))
        coerce(self, "direction", Direction.parse)
        coerce(self, "layout", ConvLayout.parse)
        coerce(self, "dtype", DType.parse)
        object.__setattr__(self, "tile", tuple(int(v) for v in self.tile))

    @property
    def ndim(self) -> int:
        return self.layout.ndim

    @property
    def backend(self) -> Backend:
        return backend_of(self.target)

    @property
    def family(self) -> str:
        return self.knobs.FAMILY

    @property
    def named_only(self) -> bool:
        return getattr(self.knobs, "named_only", False)

    @property
    def name(self) -> str:
        return "_".join([
            "conv", self.direction.token, self.layout.token, self.dtype.token,
            tile_token(self.tile), self.knobs.token, target_token(self.target)])

    @classmethod
    def from_name(cls, name: str) -> "ConvKernelConfig":
        parts = name.split("_")
        try:
            if parts[0] != "conv":
                raise ValueError("not a conv kernel")
            direction = Direction.parse(parts[1])
            layout = ConvLayout.parse(parts[2].upper())
            dtype = DType.parse(parts[3])
            tile = tile_from_token(parts[4])
            target = target_from_token(parts[-1])
            knobs = families.knobs_from_token(backend_of(target), "_".join(parts[5:-1]))
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
            "family": self.family, "knobs": self.knobs.to_dict(),
        }


CONFIG_BY_OP = {"gemm": GemmKernelConfig, "conv": ConvKernelConfig}


def config_from_name(name: str):
    """Parse any kernel name into its config."""
    op = name.split("_", 1)[0]
    if op not in CONFIG_BY_OP:
        raise ValueError(f"'{name}' is not a kernel name: unknown op '{op}'")
    return CONFIG_BY_OP[op].from_name(name)
