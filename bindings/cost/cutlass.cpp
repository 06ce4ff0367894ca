// The cutlass family's cost-model entry (cuda/gemm_sm90.cuh).
//
// The tile model (sm90_gemm_model; split-K: the count the kernel will run) plus a fixed
// start, as the skinny kernel pays (without it the model ranked CUTLASS tiles ahead of the
// skinny kernel on problems of a few microseconds where skinny was measured fastest), bounded
// below by the DRAM (gpu_dram_floor). The estimate's 5% added on top keeps the ranking among
// CUTLASS kernels exactly as the tile estimate orders them; what the floor changes is their
// standing against the skinny kernel, whose cost is bandwidth already.
//
// A fused variant (features BETA: an epilogue visitor tree) costs its tile's estimate plus
// the epilogue's extra bytes in the DRAM floor (C read when beta != 0, aux written, a wider D,
// the bias and scale vectors), and 2% more on the tile estimate: its epilogue keeps shared
// memory for C (fewer mainloop stages), so a plain problem stays on the plain variant.
#include <algorithm>

#include "cost/models.hpp"

namespace td {

double cutlass_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    const GemmShape shape{p.batch > 1 ? p.batch : 1, p.M, p.N, p.K};
    const Sm90Tile tile = sm90_tile(k);
    double cost;
    if (k.variant == TD_GEMM_SPLIT_K) {
        cost = split_k_cost(tile, k.dtype, p.M, p.N, p.K, std::max(1, split_k_count(tile, k.dtype, p, ctx.workers)),
                            ctx.workers);
    } else {
        cost = sm90_gemm_model(tile, shape, k.variant == TD_GEMM_STREAM_K, ctx.workers);
    }
    const bool fused = (k.features & TD_FEATURE_BETA) != 0;
    if (fused) cost *= 1.02;
    cost += gpu_kernel_start();
    double floor = gpu_dram_floor(shape, p.dtype);
    if (fused) floor += gpu_dram_time(gemm_epilogue_bytes(p));
    return std::max(cost, floor) + 0.05 * cost;
}

}  // namespace td
