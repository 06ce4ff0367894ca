"""cuda backend emitter: one .cu source per variant, instantiating bindings/cuda/gemm_sm90.cuh
(GEMM through CUTLASS), gemm_skinny.cuh (our decode-shape GEMM), conv_direct.cuh and conv_depthwise.cuh (our direct convolutions), conv_depthwise_mma.cuh, conv_mma.cuh and conv_mma_tiled.cuh
(tensor-core convolutions), conv_gemm.cuh (dense convolution through a CUTLASS GEMM) or conv_implicit.cuh
(dense convolution through CUTLASS's implicit-GEMM convolution)."""
from __future__ import annotations

from .emit_cpu import cpp_bool, definition
from .model import ConvKernelConfig, GemmKernelConfig, GemmVariant


def emit(config) -> str:
    k = config.knobs
    if isinstance(config, ConvKernelConfig):
        head = f"{config.dtype.code}, {config.ndim}, {config.direction.code}"
        if k.algorithm == "im2col":
            tm, tn, tk = config.tile
            return definition(config, "cuda/conv_gemm.cuh", (
                f"cuda::Sm90GemmConv<{head}, {tm}, {tn}, {tk},\n"
                f"                       {k.cluster_m}, {k.cluster_n}, {cpp_bool(k.schedule == 'pingpong')}>"))
        if k.algorithm == "implicit":
            tm, tn, tk = config.tile
            return definition(config, "cuda/conv_implicit.cuh",
                              f"cuda::Sm90ImplicitConv<{head}, {tm}, {tn}, {tk}, {k.cluster_m}, {k.cluster_n}"
                              + (f", {k.split}>" if k.split > 1 else ">"))
        if k.algorithm == "tiled_mma":
            return definition(config, "cuda/conv_mma_tiled.cuh",
                              f"cuda::Sm90TcConv<{head}, {k.channels_per_group}, {config.tile[0]}, {config.tile[1]}>")
        if k.algorithm == "depthwise":
            rows, cols, chans = config.tile
            return definition(config, "cuda/conv_depthwise.cuh",
                              f"cuda::Sm90DwConv<{head}, {rows}, {cols}, {chans}>")
        if k.algorithm in ("depthwise_mma", "toeplitz_mma"):
            rows, cols, chans = config.tile
            cpg = f", {k.channels_per_group}" if k.algorithm == "toeplitz_mma" else ""
            return definition(config, "cuda/conv_depthwise_mma.cuh",
                              f"cuda::Sm90DwMmaConv<{head}, {rows}, {cols}, {chans}{cpg}>")
        if k.algorithm == "mma":
            return definition(config, "cuda/conv_mma.cuh",
                              f"cuda::Sm90MmaConv<{head}, {k.channels_per_group}, {config.tile[0]}>")
        pixels, chans, threads = config.tile
        return definition(config, "cuda/conv_direct.cuh",
                          f"cuda::Sm90DirectConv<{head}, {k.channels_per_group}, {pixels}, {chans}, {threads}>")
    if not isinstance(config, GemmKernelConfig):
        raise TypeError(f"cannot emit {type(config).__name__}")
    tm, tn, tk = config.tile
    if k.algorithm == "skinny":
        return definition(config, "cuda/gemm_skinny.cuh", f"cuda::SkinnyGemm<{config.dtype.code}, {tm}, {tn}, {tk}>")
    streamk = config.variant is GemmVariant.STREAM_K
    reduction = config.reduction.code if streamk else -1
    # Programmatic dependent launch (cuda/gemm_sm90.cuh); CUTLASS 4.2's stream-K scheduler
    # does not compile with it (is_last_tile binds a const member to a non-const reference).
    gdc = "" if streamk else "#define CUTLASS_ENABLE_GDC_FOR_SM90  // launched as a programmatic dependent\n"
    split_k = ", true" if config.variant is GemmVariant.SPLIT_K else ""
    return definition(config, "cuda/gemm_sm90.cuh", (
        f"cuda::Sm90Gemm<{config.dtype.code}, {config.layout.code}, {cpp_bool(streamk)}, {reduction}, "
        f"{tm}, {tn}, {tk},\n"
        f"                   {k.cluster_m}, {k.cluster_n}, {cpp_bool(k.schedule == 'pingpong')}, "
        f"{cpp_bool(k.epilogue == 'nosmem')}, {cpp_bool(k.pad)}, {k.promote}{split_k}>"), defines=gdc)
