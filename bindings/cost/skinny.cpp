// The skinny family's cost-model entry (cuda/gemm_skinny.cuh): its bandwidth model. A generic
// variant (`fusion: generic`) adds its epilogue's extra bytes at the DRAM rate, and 1% on top
// so that a plain problem stays on the plain variant (the generic store tests every operand).
#include "cost/models.hpp"

namespace td {

double skinny_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    const double cost = skinny_model(k, GemmShape{1, p.M, p.N, p.K}, ctx.workers);
    if (k.features == 0) return cost;
    return 1.01 * cost + gpu_dram_time(gemm_epilogue_bytes(p));
}

}  // namespace td
