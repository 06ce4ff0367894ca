// The blocked family's cost-model entry (cpu/gemm_kernel.hpp, cpu/conv_kernel.hpp): the cpu
// GEMM model with the kernel's micro tile; convolution as the implicit GEMM it runs, its
// bwd_weight by stream-K.
#include "cost/models.hpp"

namespace td {

// A generic variant (KernelInfo.features) packs element by element and runs its epilogue at run
// time: a quarter slower than a plain variant of its tile, so a plain product never picks it.
double blocked_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    const double t = cpu_gemm_model(k.tile_m, k.tile_n, k.tile_k, k.micro_m, k.micro_n,
                                    GemmShape{p.batch > 1 ? p.batch : 1, p.M, p.N, p.K}, k.variant == TD_GEMM_STREAM_K,
                                    p.splits > 0 ? p.splits : ctx.workers, ctx.workers);
    return k.features ? 1.25 * t : t;
}

double blocked_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    return cpu_gemm_model(k.tile_m, k.tile_n, k.tile_k, k.micro_m, k.micro_n, conv_gemm_shape(g, p.base.direction),
                          k.direction == TD_CONV_BWD_WEIGHT, p.base.split_k > 0 ? p.base.split_k : ctx.workers,
                          ctx.workers);
}

}  // namespace td
