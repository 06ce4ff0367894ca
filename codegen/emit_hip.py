"""hip backend emitter: one .hip source per variant, instantiating bindings/hip/kernels_hip.hpp
(our MFMA GEMM and implicit-GEMM convolution kernels)."""
from __future__ import annotations

from string import Template

from .emit_cpu import BANNER
from .model import ConvKernelConfig, GemmKernelConfig, GemmVariant

GEMM_TEMPLATE = Template(BANNER + """\
// kernel: ${name}
#include "hip/kernels_hip.hpp"

namespace td {
extern const GemmKernel kernel_${name};
const GemmKernel kernel_${name} =
    hip::HipGemm<${dtype_code}, ${layout_code}, ${streamk}, ${reduction}, ${tile}, ${waves}, ${warp},
                 ${double_buffer}, ${interwave}, ${pad}>::entry("${name}");
}  // namespace td
""")

CONV_TEMPLATE = Template(BANNER + """\
// kernel: ${name}
#include "hip/kernels_hip.hpp"

namespace td {
extern const ConvKernel kernel_${name};
const ConvKernel kernel_${name} =
    hip::HipConv<${dtype_code}, ${ndim}, ${direction}, ${tile}, ${waves}, ${warp},
                 ${double_buffer}, ${interwave}, ${pad}>::entry("${name}");
}  // namespace td
""")


def _b(value: bool) -> str:
    return "true" if value else "false"


def emit(config) -> str:
    k = config.knobs
    common = {
        "name": config.name, "dtype_code": config.dtype.code,
        "tile": ", ".join(map(str, config.tile)), "waves": ", ".join(map(str, k.waves)),
        "warp": ", ".join(map(str, k.warp)), "double_buffer": _b(k.pipeline == "compv3"),
        "interwave": _b(k.scheduler == "interwave"), "pad": _b(k.pad),
    }
    if isinstance(config, GemmKernelConfig):
        streamk = config.variant is GemmVariant.STREAM_K
        return GEMM_TEMPLATE.substitute(common, layout_code=config.layout.code, streamk=_b(streamk),
                                        reduction=config.reduction.code if streamk else -1)
    if isinstance(config, ConvKernelConfig):
        return CONV_TEMPLATE.substitute(common, ndim=config.ndim, direction=config.direction.code)
    raise TypeError(f"cannot emit {type(config).__name__}")
