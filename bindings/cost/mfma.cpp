// The mfma family's cost-model entry (hip/kernels_hip.hpp). It has no model of its own yet:
// the cpu GEMM model, with the waves per block (M, N) in the micro tile's place.
#include "cost/models.hpp"

namespace td {

// A generic variant (KernelInfo.features): its tile's cost for the whole batch plus the
// epilogue, in the model's units (storing one accumulator costs 2): a run-time check per
// output element and 2 per extra element it moves (C read for beta, aux written; twice that
// for fp32 outputs), spread over the CUs. Plain problems still pay the checks, so a plain
// variant of the same tile ranks ahead of it for them.
double mfma_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    const int64_t batch = k.features && p.batch > 1 ? p.batch : 1;
    const double t = cpu_gemm_model(k.tile_m, k.tile_n, k.tile_k, k.wave_m, k.wave_n, GemmShape{batch, p.M, p.N, p.K},
                                    k.variant == TD_GEMM_STREAM_K, p.splits > 0 ? p.splits : ctx.workers, ctx.workers);
    if (!k.features) return t;
    const double moved = (p.beta != 0.0f ? 1.0 : 0.0) + (p.aux ? 1.0 : 0.0);
    const double width = p.out_dtype == TD_OUT_FP32 ? 2.0 : 1.0;
    const double elements = (double)batch * (double)p.M * (double)p.N;
    return t + elements * (1.0 + 2.0 * width * moved) / (ctx.workers > 0 ? ctx.workers : 1);
}

double mfma_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    return cpu_gemm_model(k.tile_m, k.tile_n, k.tile_k, k.wave_m, k.wave_n, conv_gemm_shape(g, p.base.direction),
                          false, p.base.split_k > 0 ? p.base.split_k : ctx.workers, ctx.workers);
}

}  // namespace td
