// The im2col family's cost-model entry (cuda/conv_gemm.cuh): the GEMM's tile model, priced as
// the cooperative schedule whatever the kernel's (as the bands were fitted), placed in its
// band (models.hpp: cutlass_conv_band).
#include "cost/models.hpp"

namespace td {

double im2col_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    const bool plain_gemm = g.taps() == 1 && g.stride[0] * g.stride[1] * g.stride[2] == 1 &&
                            g.pad[0] + g.pad[1] + g.pad[2] == 0;
    const Sm90Tile tile{k.tile_m, k.tile_n, k.tile_k, k.cluster_m, k.cluster_n, false, false};
    const double x = sm90_gemm_model(tile, conv_gemm_shape(g, p.base.direction), false, ctx.workers) * 1e-9;
    return cutlass_conv_band(plain_gemm && p.base.direction == TD_CONV_FWD ? 0.0 : 0.2, x);
}

}  // namespace td
