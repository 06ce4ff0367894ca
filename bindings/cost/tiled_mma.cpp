// The tiled_mma family's cost-model entry (cuda/conv_mma_tiled.cuh): tensor cores from
// shared-memory tiles, ahead of the direct and the global-memory mma kernels (H200,
// bench/conv.py: ResNeXt-50 fwd 65 -> 42 us, ResNeXt-101 196 -> 72, 3D 16 per group 284 ->
// 102); pixels per block nearest 256 (the fastest in every direction: bwd_weight ResNeXt-50
// 66.8 us against 71.4 at 512, ResNeXt-101 97.7 against 112), then 32 channels per block
// before 16. Below 4 channels per group (1/8 of the MMA's work useful) they lost to the direct
// kernels on every depthwise problem: behind them (ahead of the generic one only).
#include <cmath>

#include "cost/models.hpp"

namespace td {

double tiled_mma_conv_cost(const KernelInfo& k, const TdConvProblem&, const ConvGeometry&, const CostContext&) {
    return (k.channels_per_group >= 4 ? 0.4 : 1e6) + 0.0005 * (k.tile_n < 32) +
           0.001 * std::fabs(std::log2((double)k.tile_m / 256.0));
}

}  // namespace td
