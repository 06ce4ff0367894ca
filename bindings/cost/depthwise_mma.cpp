// The depthwise_mma family's cost-model entry (cuda/conv_depthwise_mma.cuh; 2D). Measured on
// the H200 against the CUDA-core depthwise kernels (bench/conv.py --every, bf16 fwd): ahead
// from 5x5 up (7x7 at 14 / 28 / 56 pixels 20.4 / 30.2 / 54.6 us against 35.2 / 57.5 / 107.8,
// 5x5 at 28 26.9 against 33.9), behind at 3x3 (MobileNetV2 57.1 against 47.5; the planes'
// transposition costs more than 9 FMAs a pixel). Among its tiles, the least padded area (rows
// in tiles, columns in tiles), then 16 rows, 32 columns (tiles by TMA, filter pairs: 7x7 at
// 28 x 28 16x32x16 23.9-24.3 us, 32x32x16 25.3; at 56 x 56 41.6-41.9 against 42.0; at 14 x 14
// 16x16x16 17.4-17.8 against 22.9-23.0 at 16x32); on small images (a 7x7 image fills a fifth
// of a 16 x 16 tile) the waste puts it behind the CUDA-core kernels.
//
// bwd_weight (rows streamed through TMA rings, Hankel MMAs): ahead of the sliding CUDA-core
// kernel from 5x5 up (H200, bench/conv.py --every: 7x7 at 14 / 28 / 56 pixels 19.2 / 27.4 /
// 41.4 us against 35.5 / 49.6 / 82.6, 5x5 at 28 27.0 against 35.0), behind it at 3x3
// (MobileNetV2 85.9 against 49.9), ahead of the direct kernels. Among its tiles (input rows a
// step x columns x channels) the fewest padded columns, then 32 columns (28 x 28: 4x32x32
// 27.4 us, 8x16x32 28.7; 14 x 14: 8x16x32 19.2, 4x32x32 28.0).
#include <cstdlib>

#include "cost/models.hpp"

namespace td {

double depthwise_mma_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g,
                               const CostContext&) {
    if (p.base.direction == TD_CONV_BWD_WEIGHT) {
        const int64_t wo = g.out[2], cols = (wo + k.tile_n - 1) / k.tile_n * k.tile_n;
        return (g.fil[1] >= 5 ? 0.3 : 0.4) + 0.1 * ((double)cols / (double)wo - 1.0) +
               0.0001 * std::abs(k.tile_n - 32) + 0.0001 * std::abs(k.tile_m - 4) + 0.0001 * std::abs(k.tile_k - 32);
    }
    return (g.fil[1] <= 3 ? 0.36 : 0.3) + 0.1 * toeplitz_waste(k, p, g) + toeplitz_tile_preference(k);
}

}  // namespace td
