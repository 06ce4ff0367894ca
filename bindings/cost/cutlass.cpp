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

// The bytes a fused epilogue moves beyond a plain GEMM's A, B and D.
static double epilogue_bytes(const TdGemmProblem& p) {
    const double batch = p.batch > 1 ? (double)p.batch : 1.0;
    const int out = p.out_dtype != TD_OUT_DEFAULT ? p.out_dtype
                    : p.dtype == TD_FP32              ? TD_OUT_FP32
                    : p.dtype == TD_FP16              ? TD_OUT_FP16
                                                      : TD_OUT_BF16;
    const double ob = out == TD_OUT_FP32 ? 4.0 : 2.0;
    const double mn = batch * (double)p.M * (double)p.N;
    double bytes = mn * (ob - (double)out_bytes(p.dtype));  // a wider D than the plain one
    if (p.beta != 0.0f) bytes += mn * ob;
    if (p.aux) bytes += mn * ob;
    if (p.bias == TD_BIAS_N) bytes += (double)p.N * ob;
    if (p.bias == TD_BIAS_M) bytes += (double)p.M * ob;
    if (p.row_scale) bytes += 4.0 * (double)p.M;
    if (p.col_scale) bytes += 4.0 * (double)p.N;
    return bytes;
}

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
    if (fused) floor += gpu_dram_time(epilogue_bytes(p));
    return std::max(cost, floor) + 0.05 * cost;
}

}  // namespace td
