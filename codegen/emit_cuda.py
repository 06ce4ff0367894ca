"""cuda backend emitter: one .cu source per variant, instantiating bindings/cuda/gemm_sm90.cuh
(GEMM through CUTLASS) or bindings/cuda/conv_direct.cuh (our own direct convolutions)."""
from __future__ import annotations

from string import Template

from .emit_cpu import BANNER
from .model import ConvKernelConfig, GemmKernelConfig, GemmVariant

GEMM_TEMPLATE = Template(BANNER + """\
// kernel: ${name}
#include "cuda/gemm_sm90.cuh"

namespace td {
extern const GemmKernel kernel_${name};
const GemmKernel kernel_${name} =
    cuda::Sm90Gemm<${dtype_code}, ${layout_code}, ${streamk}, ${reduction}, ${tile_m}, ${tile_n}, ${tile_k},
                   ${cluster_m}, ${cluster_n}, ${pingpong}, ${nosmem}, ${pad}>::entry("${name}");
}  // namespace td
""")

CONV_TEMPLATE = Template(BANNER + """\
// kernel: ${name}
#include "cuda/conv_direct.cuh"

namespace td {
extern const ConvKernel kernel_${name};
const ConvKernel kernel_${name} =
    cuda::Sm90DirectConv<${dtype_code}, ${ndim}, ${direction}, ${cpg}, ${pixels}, ${chans}, ${threads}>::entry("${name}");
}  // namespace td
""")

CONV_MMA_TEMPLATE = Template(BANNER + """\
// kernel: ${name}
#include "cuda/conv_mma.cuh"

namespace td {
extern const ConvKernel kernel_${name};
const ConvKernel kernel_${name} =
    cuda::Sm90MmaConv<${dtype_code}, ${ndim}, ${direction}, ${cpg}, ${pixels}>::entry("${name}");
}  // namespace td
""")

CONV_GEMM_TEMPLATE = Template(BANNER + """\
// kernel: ${name}
#include "cuda/conv_gemm.cuh"

namespace td {
extern const ConvKernel kernel_${name};
const ConvKernel kernel_${name} =
    cuda::Sm90GemmConv<${dtype_code}, ${ndim}, ${direction}, ${tile_m}, ${tile_n}, ${tile_k},
                       ${cluster_m}, ${cluster_n}, ${pingpong}>::entry("${name}");
}  // namespace td
""")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def emit(config) -> str:
    if isinstance(config, ConvKernelConfig) and config.knobs.algorithm == "im2col":
        k = config.knobs
        tm, tn, tk = config.tile
        return CONV_GEMM_TEMPLATE.substitute(
            name=config.name, dtype_code=config.dtype.code, ndim=config.ndim, direction=config.direction.code,
            tile_m=tm, tile_n=tn, tile_k=tk, cluster_m=k.cluster_m, cluster_n=k.cluster_n,
            pingpong=_bool(k.schedule == "pingpong"))
    if isinstance(config, ConvKernelConfig) and config.knobs.algorithm == "mma":
        return CONV_MMA_TEMPLATE.substitute(
            name=config.name, dtype_code=config.dtype.code, ndim=config.ndim,
            direction=config.direction.code, cpg=config.knobs.channels_per_group, pixels=config.tile[0])
    if isinstance(config, ConvKernelConfig):
        pixels, chans, threads = config.tile
        return CONV_TEMPLATE.substitute(
            name=config.name, dtype_code=config.dtype.code, ndim=config.ndim,
            direction=config.direction.code, cpg=config.knobs.channels_per_group,
            pixels=pixels, chans=chans, threads=threads)
    if not isinstance(config, GemmKernelConfig):
        raise TypeError(f"cannot emit {type(config).__name__}")
    k = config.knobs
    tm, tn, tk = config.tile
    streamk = config.variant is GemmVariant.STREAM_K
    return GEMM_TEMPLATE.substitute(
        name=config.name, dtype_code=config.dtype.code, layout_code=config.layout.code,
        streamk=_bool(streamk), reduction=config.reduction.code if streamk else -1,
        tile_m=tm, tile_n=tn, tile_k=tk, cluster_m=k.cluster_m, cluster_n=k.cluster_n,
        pingpong=_bool(k.schedule == "pingpong"), nosmem=_bool(k.epilogue == "nosmem"), pad=_bool(k.pad))
