// The cutlass_grouped family's cost-model entry (cuda/gemm_sm90_grouped.cuh): one group's share of
// a grouped launch. A grouped call ranks the grouped kernels by this entry summed over its groups
// of M > 0 (gemm_abi.cpp, grouped_candidates); they rank only against each other (where one takes
// the call it runs, else the per-group loop does).
//
// One persistent grid runs the output tiles of every group back to back, so a group's share is
// the wave model of a CUTLASS sm90 GEMM (sm90_gemm_model, data-parallel) without its last wave
// rounded up: its tiles' time spread over all the clusters, a fraction of a wave where the group
// has fewer tiles than there are clusters (a mixture-of-experts group of a few dozen rows). It is
// bounded below by the group's bytes at the DRAM rate (gpu_dram_floor): each group reads its own
// B, so a call of many small groups is the experts' weights streamed once. The launch's start is
// the same for every grouped kernel and is left out. Not yet calibrated against measurements.
#include <algorithm>

#include "cost/models.hpp"

namespace td {

double cutlass_grouped_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    const GemmShape shape{1, p.M, p.N, p.K};
    const Sm90Tile tile = sm90_tile(k);
    const int64_t cm = std::max(1, tile.cluster_m), cn = std::max(1, tile.cluster_n);
    const int64_t slots = std::max<int64_t>(1, ctx.workers / (cm * cn));
    const int64_t cluster_tiles = ((p.M + tile.tile_m * cm - 1) / (tile.tile_m * cm)) *
                                  ((p.N + tile.tile_n * cn - 1) / (tile.tile_n * cn));
    const int64_t waves = (cluster_tiles + slots - 1) / slots;
    const double whole = sm90_gemm_model(tile, shape, false, ctx.workers);
    const double share = whole * (double)cluster_tiles / (double)(waves * slots);
    return std::max(share, gpu_dram_floor(shape, p.dtype));
}

}  // namespace td
