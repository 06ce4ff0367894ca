// The mma family's cost-model entry (cuda/conv_mma.cuh). Measured on the H200
// (bench/RESULTS.md): 14x faster than the direct kernels at 16 channels per group, slower at
// 4 and 8: first from 16 up, else behind the direct ones.
#include "cost/models.hpp"

namespace td {

double mma_conv_cost(const KernelInfo& k, const TdConvProblem&, const ConvGeometry&, const CostContext&) {
    return k.channels_per_group >= 16 ? 0.5 : 1e6;
}

}  // namespace td
