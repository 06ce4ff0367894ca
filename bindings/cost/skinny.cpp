// The skinny family's cost-model entry (cuda/gemm_skinny.cuh): its bandwidth model.
#include "cost/models.hpp"

namespace td {

double skinny_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    return skinny_model(k, GemmShape{1, p.M, p.N, p.K}, ctx.workers);
}

}  // namespace td
