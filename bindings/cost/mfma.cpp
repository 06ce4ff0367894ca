// The mfma family's cost-model entry (hip/kernels_hip.hpp). It has no model of its own yet:
// the cpu GEMM model, with the waves per block (M, N) in the micro tile's place.
#include "cost/models.hpp"

namespace td {

double mfma_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    return cpu_gemm_model(k.tile_m, k.tile_n, k.tile_k, k.wave_m, k.wave_n, GemmShape{1, p.M, p.N, p.K},
                          k.variant == TD_GEMM_STREAM_K, p.splits > 0 ? p.splits : ctx.workers, ctx.workers);
}

double mfma_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    return cpu_gemm_model(k.tile_m, k.tile_n, k.tile_k, k.wave_m, k.wave_n, conv_gemm_shape(g, p.base.direction),
                          false, p.base.split_k > 0 ? p.base.split_k : ctx.workers, ctx.workers);
}

}  // namespace td
