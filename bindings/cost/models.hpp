// The time models the families' cost functions share (arbitrary units, lower is faster):
// the cpu GEMM model, the wave model of a CUTLASS sm90 GEMM, the skinny kernel's bandwidth
// model and split-K. Each family's own entry is in bindings/cost/<family>.cpp.
#pragma once

#include <cstdint>

#include "tiledispatch/conv_geometry.hpp"
#include "tiledispatch/kernel.hpp"

namespace td {

// The (batched) GEMM a problem becomes.
struct GemmShape {
    int64_t batch, m, n, k;
};

// The GEMM a convolution direction amounts to: G batches of (M, N, K).
inline GemmShape conv_gemm_shape(const ConvGeometry& g, int direction) {
    const int64_t taps = g.taps();
    if (direction == TD_CONV_FWD) return {g.G, g.N * g.out_pixels(), g.K, taps * g.C};
    if (direction == TD_CONV_BWD_DATA) return {g.G, g.N * g.in_pixels(), g.C, taps * g.K};
    return {g.G, g.K, taps * g.C, g.N * g.out_pixels()};
}

// Dense convolutions on CUTLASS rank ahead of the direct kernels (cost < 0.5), in three bands
// measured on the H200 (bench/RESULTS.md):
//  [0.0, 0.1) im2col where the problem is a plain GEMM forward (1x1, stride 1, no padding):
//             its clustered GEMM beat the implicit kernel (35.6 vs 40.4 us, ResNet 1x1
//             512->2048), though not backward (49 vs 35 us bwd_data);
//  [0.1, 0.2) the implicit kernels;
//  [0.2, 0.3) im2col elsewhere (2-3x behind: the buffer's write and read).
// cutlass_conv_band(lo, x): x >= 0 mapped monotonically into [lo, lo + 0.1).
inline double cutlass_conv_band(double lo, double x) { return lo + 0.1 * x / (x + 1.0); }

// Bytes of one input / output element of a dtype (fp8 inputs give bf16 outputs).
int64_t in_bytes(int dtype);
int64_t out_bytes(int dtype);

// The cpu model of a blocked GEMM with a `micro_m` x `micro_n` register micro tile on
// `threads` workers: tile waves, K-loop length, packing and micro-tile efficiency, stream-K
// balance (over `workers` workers) plus its fix-up.
double cpu_gemm_model(int tile_m, int tile_n, int tile_k, int micro_m, int micro_n, const GemmShape& s,
                      bool streamk, int64_t workers, int threads);

// A CUTLASS sm90 tile as the GPU model sees it.
struct Sm90Tile {
    int tile_m, tile_n, tile_k;
    int cluster_m, cluster_n;
    bool pingpong;  // the ping-pong schedule (else cooperative)
    bool pad;       // the pad variant (the same kernel plus its checks)
};
Sm90Tile sm90_tile(const KernelInfo& k);

// The GPU model of a CUTLASS sm90 GEMM (persistent CTAs, one per SM, clusters scheduled
// together; stream-K balances K steps over the SMs and pays a fix-up for split tiles).
double sm90_gemm_model(const Sm90Tile& t, const GemmShape& s, bool streamk, int64_t sms);

// A GEMM's unique bytes (A, B, C) at 3.3 TB/s, the rate CUTLASS's tiles reach at M 16-64 on
// the H200 with L2 flushed, in the GPU model's units: a lower bound for a kernel's time.
double gpu_dram_floor(const GemmShape& shape, int dtype);

// `bytes` moved at the same 3.3 TB/s, in the GPU model's units (a fused epilogue's extra
// traffic: C, aux, its vectors).
double gpu_dram_time(double bytes);

// The bytes a fused epilogue moves beyond a plain GEMM's A, B and D: C read when beta != 0,
// aux written, a wider D than the plain one, the bias and scale vectors.
double gemm_epilogue_bytes(const TdGemmProblem& p);

// A CUTLASS kernel's start and tail (3 us, as the skinny kernel's) in the same units.
double gpu_kernel_start();

// Our skinny decode GEMM (cuda/gemm_skinny.cuh) in the same units.
double skinny_model(const KernelInfo& k, const GemmShape& s, int64_t sms);

// Split-K (cuda/gemm_sm90.cuh): K cut into `splits` equal parts run as a batch with fp32
// partials, then summed. split_k_count: the count a kernel runs problem `p` with: the
// problem's `splits` where it cuts K into parts of a multiple of 16 bytes (0 where it does
// not), else the count in 1..32 the model rates fastest. split_k_cost: the GPU model's time
// of that run, the sum included.
int split_k_count(const Sm90Tile& t, int dtype, const TdGemmProblem& p, int64_t sms);
double split_k_cost(const Sm90Tile& t, int dtype, int64_t M, int64_t N, int64_t K, int splits, int64_t sms);

// The Toeplitz tensor-core kernels (depthwise_mma, toeplitz_mma): the padded area's excess
// over the image (fwd: the output's, bwd_data: the input's), and the preference among tiles
// of equal waste (16 rows, 32 columns, 16 channels).
double toeplitz_waste(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g);
double toeplitz_tile_preference(const KernelInfo& k);

}  // namespace td
