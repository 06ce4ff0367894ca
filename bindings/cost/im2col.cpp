// The im2col family's cost-model entry (cuda/conv_gemm.cuh), on the problem with its channels
// padded to multiples of 8 (the one the GEMM runs).
//  - Standard GEMM: the GEMM's tile model, priced as the cooperative schedule whatever the
//    kernel's (as the bands were fitted), placed in its band (models.hpp: cutlass_conv_band).
//  - Split-K bwd_weight: in the implicit family's band [0.1, 0.2) and its one-wave units
//    (cost/implicit.cpp: 1 / fill for a 128x128 tile that fills the GPU), so that the two
//    compare: fill = the CTAs (output tiles x the split count the GEMM will run) over the SM
//    slots of their waves, x 1.1 (the partials' sum); the im2col buffer (written, then read
//    instead of the input) adds 1.5 outside the 1x1 stride-1 case. The implicit kernel keeps
//    the problems whose output tiles fill the GPU; the split GEMM takes the small outputs over
//    long reductions (zoo, H100: implicit 0.38x cuDNN over 239 dense bwd_weight layers, 0.06x
//    at 16 -> 16 channels on 112 x 112: one CTA).
// A misaligned problem (C or K not a multiple of 8) adds 0.02 for its padded copies; on an
// aligned one a padding variant ranks just behind its twin without padding.
#include <algorithm>
#include <cstdint>

#include "cost/models.hpp"

namespace td {

double im2col_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    ConvGeometry q = g;
    q.C = (g.C + 7) / 8 * 8;
    q.K = (g.K + 7) / 8 * 8;
    const double padding = q.C != g.C || q.K != g.K ? 0.02 : k.pad ? 1e-4 : 0.0;
    const bool plain_gemm = g.taps() == 1 && g.stride[0] * g.stride[1] * g.stride[2] == 1 &&
                            g.pad[0] + g.pad[1] + g.pad[2] == 0;
    const int direction = p.base.direction;
    const Sm90Tile tile{k.tile_m, k.tile_n, k.tile_k, k.cluster_m, k.cluster_n, false, false};
    if (k.variant == TD_GEMM_SPLIT_K && direction == TD_CONV_BWD_WEIGHT) {
        TdGemmProblem gp{};
        gp.dtype = p.dtype;
        gp.layout = TD_CRR;
        gp.M = q.K;
        gp.N = q.taps() * q.C;
        gp.K = q.N * q.out_pixels();
        const int splits = std::max(1, split_k_count(tile, p.dtype, gp, ctx.workers));
        const int64_t ctas = (gp.M + k.tile_m - 1) / k.tile_m * ((gp.N + k.tile_n - 1) / k.tile_n) * splits;
        const int64_t waves = (ctas + ctx.workers - 1) / ctx.workers;
        const double fill = (double)ctas / (double)(waves * ctx.workers);
        const double x = 1.1 / fill + (plain_gemm ? 0.0 : 1.5);
        return cutlass_conv_band(0.1, x) + padding;
    }
    const double x = sm90_gemm_model(tile, conv_gemm_shape(q, direction), false, ctx.workers) * 1e-9;
    return cutlass_conv_band(plain_gemm && direction == TD_CONV_FWD ? 0.0 : 0.2, x) + padding;
}

}  // namespace td
