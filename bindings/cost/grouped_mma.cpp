// The grouped_mma family's cost-model entry (cuda/conv_grouped_mma.cuh): tensor-core implicit
// GEMM with run-time channel counts.
//
// The conv entries rank in bands (lower is faster): CUTLASS on dense problems below 0.3
// (models.hpp), tiled_mma 0.4 and mma 0.5 on their channel counts, the direct kernels from 1.0,
// the generic direct kernel 1e9. This family takes
//   [0.45, 0.5)  grouped problems with more than 16 channels per group, or C != K: ahead of the
//                generic kernel (H200, bf16, G 4 x 64 channels, 56 x 56, batch 32, 3x3, fwd:
//                181 us against 58 ms) and of mma at 32 channels per group (G 32, 28 x 28,
//                batch 32: fwd 149 us against 346, bwd_data 223 against 586; batch 2, 14 x 14:
//                fwd 7.9 against 14.4);
//   [0.35, 0.4)  dense problems (G = 1): behind CUTLASS, ahead of the generic kernel (bwd_data at
//                stride > 1, which the GEMM path refuses);
//   [10, 10.05)  C = K <= 16: the direct, tiled_mma and mma kernels' own channel counts (G 32 x 16
//                channels, 14 x 14, batch 32: tiled_mma 16 us in every direction, this
//                family 28-63).
// Within a band, the variants rank by a roofline time of the tile: the padded MMA work at a
// rate that grows with the tile's operand reuse (BM BN / (BM + BN)), the busiest SM's share of
// the blocks, against the tensors' bytes at 3.3 TB/s, plus bwd_weight's fp32 partial rows and
// their sum.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cost/models.hpp"

namespace td {

static int64_t gmma_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Seconds of one run of the kernel with tile (bm, bn, bk) on `sms` SMs.
static double grouped_mma_seconds(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, int64_t sms) {
    const int direction = p.base.direction;
    const int64_t bm = k.tile_m, bn = k.tile_n, bk = k.tile_k;
    const int64_t taps = g.taps();
    int64_t M, Ng, Kred, blocks_per_group;
    double useful_rows = 1.0;  // bwd_data at stride > 1: the phases' rows are shorter (taps only where whole)
    if (direction == TD_CONV_FWD) {
        M = g.N * g.out_pixels(); Ng = g.K; Kred = taps * g.C;
    } else if (direction == TD_CONV_BWD_DATA) {
        M = g.N * g.in_pixels(); Ng = g.C; Kred = taps * g.K;
        useful_rows = 1.0 / (double)(g.stride[0] * g.stride[1] * g.stride[2]);
    } else {
        M = g.K; Ng = taps * g.C; Kred = g.N * g.out_pixels();
    }
    const int64_t tiles = gmma_cdiv(M, bm) * gmma_cdiv(Ng, bn);
    // bwd_weight splits the reduction to fill about four blocks per SM (conv_grouped_mma.cuh)
    int64_t splits = 1;
    if (direction == TD_CONV_BWD_WEIGHT) {
        const int64_t steps = gmma_cdiv(Kred, bk);
        splits = std::max<int64_t>(1, std::min<int64_t>({gmma_cdiv(4 * 132, g.G * tiles), 64, std::max<int64_t>(1, steps / 8)}));
    }
    blocks_per_group = tiles * splits;
    const int64_t blocks = g.G * blocks_per_group;
    const int64_t steps_per_block = gmma_cdiv(gmma_cdiv(Kred, splits), bk);
    // one SM's MMA rate: 220 TFLOP/s over 132 SMs at the reuse of a 128 x 128 tile (measured
    // 212 at 128x128x64, 175 at 128x64x64, 145 at 64x64x64), the square root of the reuse below
    const double reuse = (double)(bm * bn) / (double)(bm + bn) / 64.0;
    const double sm_rate = 220e12 / 132.0 * std::sqrt(std::min(1.0, reuse));
    // a block's work: its steps plus about three for the pipeline's start and the results
    const double block_flops = 2.0 * (double)(bm * bn * bk) * ((double)steps_per_block * useful_rows + 3.0);
    // the busiest SM's blocks one after the other at its rate (the blocks resident together share it)
    const double mma_s = (double)gmma_cdiv(blocks, sms) * block_flops / sm_rate;
    // unique bytes: the input, the weights and the output, 2 bytes each
    const double bytes = 2.0 * (double)(g.N * g.in_pixels() * g.G * g.C + g.G * g.K * taps * g.C +
                                        g.N * g.out_pixels() * g.G * g.K);
    double seconds = std::max(mma_s, bytes / 3.3e12) + 4e-6;  // launch, start and tail
    if (splits > 1) {  // fp32 partial rows written and read, the reduce's launch
        const double partial = 4.0 * (double)splits * (double)(g.G * g.K * taps * g.C);
        seconds += 2.0 * partial / 3e12 + 2e-6;
    }
    return seconds;
}

double grouped_mma_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g,
                             const CostContext& ctx) {
    const double us = grouped_mma_seconds(k, p, g, std::max(1, ctx.workers)) * 1e6;
    const double within = 0.05 * us / (us + 1000.0);  // monotonic in the time, below 0.05
    if (g.C == g.K && g.C <= 16) return 10.0 + within;
    if (g.G == 1) return 0.35 + within;
    return 0.45 + within;
}

}  // namespace td
