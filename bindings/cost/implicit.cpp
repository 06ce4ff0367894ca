// The implicit family's cost-model entry (cuda/conv_implicit.cuh), in the [0.1, 0.2) band
// (models.hpp: cutlass_conv_band). Forward and bwd_data by the GEMM tile model, each extra
// tile along GEMM N (the weights' side) costing 2% (64x256 beat 128x128 at 3x3 256->256:
// 49.6 vs 52.7 us). bwd_weight (a short M x N, a long K) by a one-wave model: one CTA per
// SM: fill = the CTAs (times the batch slices) over the SM slots of the waves they take; a
// tile's speed from its size. H200, 1x1 512->2048 (bench/RESULTS.md): 128x128 36 us on 64
// SMs, 64x128 26.2 and 128x64 32.5 on 128, 64x64 40.5 in two waves: speeds 1, 0.69, 0.55,
// 0.44 ~ (area / 128^2)^0.55, x 0.8 where tile N < tile M. Each slice beyond the first costs
// 0.1 (its fp32 partial, the reduce): 3x3 256->256 128x128 in 3 slices 55.5 us against 119
// unsplit. A split variant at one slice ranks just behind the unsplit kernel of its tile.
#include <cmath>

#include "cost/models.hpp"

namespace td {

double implicit_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    const int workers = ctx.workers;
    const GemmShape s = conv_gemm_shape(g, p.base.direction);
    if (p.base.direction == TD_CONV_BWD_WEIGHT) {
        const int max_split = k.split > 1 ? k.split : -1;
        const int split = implicit_wgrad_slices(g, k.tile_m, k.tile_n, k.cluster_m, k.cluster_n, max_split,
                                                p.base.split_k, workers);
        const int64_t ctas = implicit_wgrad_ctas(g, k.tile_m, k.tile_n, k.cluster_m, k.cluster_n) * split;
        const int64_t waves = (ctas + workers - 1) / workers;
        const double fill = (double)ctas / (double)(waves * workers);
        const double speed = std::pow((double)k.tile_m * k.tile_n / 16384.0, 0.55) * (k.tile_n < k.tile_m ? 0.8 : 1.0);
        return cutlass_conv_band(0.1, 1.0 / (fill * speed) + 0.1 * (split - 1) + (max_split > 1 ? 0.01 : 0.0));
    }
    const int64_t tiles_n = (s.n + k.tile_n - 1) / k.tile_n;
    const Sm90Tile tile{k.tile_m, k.tile_n, k.tile_k, k.cluster_m, k.cluster_n, false, false};
    const double x = sm90_gemm_model(tile, s, false, workers) * 1e-9 * (1.0 + 0.02 * (double)(tiles_n - 1));
    return cutlass_conv_band(0.1, x);
}

}  // namespace td
