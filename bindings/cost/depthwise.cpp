// The depthwise family's cost-model entry (cuda/conv_depthwise.cuh): ahead of the direct
// kernels wherever they take the problem (H200, bench/conv.py: MobileNetV2 3x3 fwd 78 -> 50
// us, ConvNeXt 7x7 fwd 87 -> 60, Mamba conv1d fwd 115 -> 72, bwd_weight 122 -> 91, 150 -> 96,
// 117 -> 97). Rows per thread nearest 3 for filters up to 3 rows, else 4 (the fastest of 1-4
// rows there: 3x3 50.5 us at 3 rows, 53.9 at 4; 7x7 59.7 at 4, 65.5 at 3). bwd_weight: the
// sliding kernel (rows > 1) ahead of the row kernel, 8 columns x 2 channels for 3x3, 4 x 1 for
// larger filters (3x3 53.6 us against 62.3 at 8x1 and 77.2 for the row kernel; 7x7 52.9
// against 68.7 at 2x1 and 90.4); segments of at least 4, 8 or 16 rows measured alike, 8 kept.
#include <cstdlib>

#include "cost/models.hpp"

namespace td {

double depthwise_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext&) {
    const bool wgrad = p.base.direction == TD_CONV_BWD_WEIGHT;
    const int rows = wgrad ? 8 : g.fil[1] <= 3 ? 3 : 4;
    const int cols = wgrad && g.fil[1] <= 3 ? 8 : 4;
    const int chans = !wgrad ? 4 : g.fil[1] <= 3 ? 2 : 1;
    return 0.35 + 0.001 * std::abs(k.tile_m - rows) + 0.0001 * std::abs(k.tile_n - cols) +
           0.0001 * std::abs(k.tile_k - chans);
}

}  // namespace td
