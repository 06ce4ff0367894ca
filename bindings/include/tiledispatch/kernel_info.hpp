// Generated from python/tiledispatch/codegen/abi.py by `python -m codegen abi --write`;
// do not edit (tests/test_abi.py checks it is current).

#pragma once

#include <cstdint>

namespace td {

// A kernel's description: named, typed fields; those its family does not use hold
// KERNEL_INFO_DEFAULTS (-1 for enums, 1 for split and promote, else 0).
struct KernelInfo {
    const char* name;  // the variant's name: its identity
    int32_t family;  // enum td_family
    int32_t dtype;  // enum td_dtype
    int32_t layout;  // gemm: enum td_layout (conv: -1)
    int32_t variant;  // gemm: enum td_gemm_variant (conv: the im2col GEMM's, otherwise -1)
    int32_t reduction;  // gemm stream-K: enum td_reduction (otherwise -1)
    int32_t ndim;  // conv: spatial rank 1, 2 or 3 (gemm: 0)
    int32_t direction;  // conv: enum td_conv_direction (gemm: -1)
    int32_t tile_m;  // the block tile; what its sides mean is the family's (docs/manifest.md)
    int32_t tile_n;
    int32_t tile_k;
    int32_t micro_m;  // blocked: the register micro tile
    int32_t micro_n;
    int32_t wave_m;  // mfma: waves per block along M, N, K
    int32_t wave_n;
    int32_t wave_k;
    int32_t warp_m;  // mfma: the MFMA instruction shape
    int32_t warp_n;
    int32_t warp_k;
    int32_t double_buffer;  // mfma: 1 the compv3 pipeline (two LDS buffers), 0 mem
    int32_t interwave;  // mfma: 1 the interwave scheduler
    int32_t cluster_m;  // cutlass, im2col, implicit: the thread-block cluster
    int32_t cluster_n;
    int32_t pingpong;  // cutlass, im2col: 1 the ping-pong schedule, 0 cooperative
    int32_t nosmem_epilogue;  // cutlass: 1 the epilogue without shared memory
    int32_t pad;  // cutlass: 1 misaligned operands staged through aligned copies; im2col: 1 channels padded to 8; mfma: 1 any size
    int32_t promote;  // cutlass fp8: 1 our mainloop, N CUTLASS's every N MMAs, 0 fast accumulation
    int32_t channels_per_group;  // direct (0: any), mma, tiled_mma, toeplitz_mma; depthwise families 1
    int32_t split;  // implicit bwd_weight: batch slices at most (1: none)
    int32_t named_only;  // 1: never picked, run only when named (a less precise contract)
    int32_t vendor;  // 1: a vendor library's kernel (cudnn, cublaslt): left out of selection when TdOptions.vendor is 0
    int32_t features;  // gemm: enum td_feature bits the kernel implements (0: D = alpha * A * B alone)
};

}  // namespace td
