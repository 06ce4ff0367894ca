"""hip backend emitter: one .hip source per variant, instantiating bindings/hip/kernels_hip.hpp
(our MFMA GEMM and implicit-GEMM convolution kernels)."""
from __future__ import annotations

from .emit_cpu import cpp_bool, definition
from .model import ConvKernelConfig, GemmKernelConfig, GemmVariant


def emit(config) -> str:
    k = config.knobs
    knobs = (f"{', '.join(map(str, config.tile))}, {', '.join(map(str, k.waves))}, "
             f"{', '.join(map(str, k.warp))},\n"
             f"                 {cpp_bool(k.pipeline == 'compv3')}, {cpp_bool(k.scheduler == 'interwave')}, "
             f"{cpp_bool(k.pad)}>")
    if isinstance(config, GemmKernelConfig):
        streamk = config.variant is GemmVariant.STREAM_K
        reduction = config.reduction.code if streamk else -1
        return definition(config, "hip/kernels_hip.hpp", (
            f"hip::HipGemm<{config.dtype.code}, {config.layout.code}, {cpp_bool(streamk)}, {reduction}, {knobs}"))
    if isinstance(config, ConvKernelConfig):
        return definition(config, "hip/kernels_hip.hpp", (
            f"hip::HipConv<{config.dtype.code}, {config.ndim}, {config.direction.code}, {knobs}"))
    raise TypeError(f"cannot emit {type(config).__name__}")
