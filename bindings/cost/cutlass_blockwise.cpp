// The cutlass_blockwise family's cost-model entry (cuda/gemm_sm90_blockwise.cuh).
//
// The plain fp8 wave model of a CUTLASS sm90 tile (sm90_gemm_model) and the kernel start,
// bounded below by the DRAM (gpu_dram_floor) plus the scales' bytes: each output tile reads
// its rows of scale_a (tile_m x ceil(K/128) floats) and its column of scale_b (tile_n / 128 x
// ceil(K/128)), at the floor's 3.3 TB/s. Only problems with block-wise scales reach it.
#include <algorithm>

#include "cost/models.hpp"

namespace td {

double cutlass_blockwise_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    const GemmShape shape{1, p.M, p.N, p.K};
    const Sm90Tile tile = sm90_tile(k);
    const double k_blocks = (double)((p.K + 127) / 128);
    const double tiles_m = (double)((p.M + k.tile_m - 1) / k.tile_m);
    const double tiles_n = (double)((p.N + k.tile_n - 1) / k.tile_n);
    const double scale_bytes = 4.0 * k_blocks * tiles_m * tiles_n * (k.tile_m + k.tile_n / 128.0);
    const double units_per_s = gpu_kernel_start() / 3e-6;  // the start is 3 us in the model's units
    const double scale_time = scale_bytes / 3.3e12 * units_per_s;
    double cost = sm90_gemm_model(tile, shape, false, ctx.workers) + gpu_kernel_start();
    return std::max(cost, gpu_dram_floor(shape, p.dtype)) + scale_time + 0.05 * cost;
}

}  // namespace td
