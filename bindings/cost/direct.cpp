// The direct family's cost-model entry (cuda/conv_direct.cuh): the kernel specialised for
// the problem's channels per group first, then by how well its threads fill the GPU (2048 per
// SM); the generic kernel (any channel count) last.
#include <algorithm>
#include <cstdint>

#include "cost/models.hpp"

namespace td {

double direct_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    if (k.channels_per_group == 0) return 1e9;
    const int direction = p.base.direction;
    const int64_t pixels_w = direction == TD_CONV_BWD_DATA ? g.in[2] : g.out[2];
    const int64_t rows = g.N * (direction == TD_CONV_BWD_DATA ? g.in[0] * g.in[1] : g.out[0] * g.out[1]);
    const int64_t items = direction == TD_CONV_BWD_WEIGHT
        ? INT64_MAX
        : rows * ((pixels_w + k.tile_m - 1) / k.tile_m) * (g.G * k.channels_per_group / std::max(1, k.tile_n));
    const double fill = (double)ctx.workers * 2048.0;
    // among equals, 4 output pixels per thread (measured on the H200, bench/RESULTS.md)
    const double pixels = k.tile_m == 4 ? 0.0 : 0.01;
    return 1.0 + pixels + (items < fill ? (fill / (double)items - 1.0) * 0.05 : 0.0);
}

}  // namespace td
