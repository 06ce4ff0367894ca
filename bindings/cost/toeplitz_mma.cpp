// The toeplitz_mma family's cost-model entry (cuda/conv_depthwise_mma.cuh, grouped; opt-in):
// level with tiled_mma on ResNeXt-50 (fwd 38.2 against 37.7 us, bwd_data 38.5 against 37.9):
// behind it; among its tiles as depthwise_mma's.
#include "cost/models.hpp"

namespace td {

double toeplitz_mma_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext&) {
    return 0.45 + 0.1 * toeplitz_waste(k, p, g) + toeplitz_tile_preference(k);
}

}  // namespace td
