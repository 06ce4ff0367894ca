// The pointwise family's cost-model entry (cuda/conv_pointwise.cuh): CUDA-core 1x1 kernels that
// read every pixel once. Their time is the larger of the bytes at 3 TB/s and the FMAs (the
// written channels rounded up to the kernel's block of them) at half the CUDA cores' rate;
// `ratio` = FMA time / memory time. Where the layer is memory-bound on them (ratio up to 1.5:
// few channels a pixel, e.g. 16 -> 24 at 112 x 112, where the CUTLASS GEMMs ran 0.3-0.6x cuDNN
// on the H100 zoo) or tiny (under 2^22 FMAs: one launch where a GEMM pays its start, e.g. the
// squeeze-excite 1x1 layers on 1 x 1 pixels), they rank first, ahead of cuDNN's prior (0.0);
// up to ratio 4 ahead of the CUTLASS bands but behind cuDNN; beyond that behind the GEMMs
// (0.5) and ahead of the generic direct kernel only. Among tiles: the smallest block of
// written channels that holds them, then 256 threads.
#include <algorithm>
#include <cmath>

#include "cost/models.hpp"

namespace td {

double pointwise_conv_cost(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g, const CostContext& ctx) {
    const int direction = p.base.direction;
    const double cin = (double)(direction == TD_CONV_BWD_DATA ? g.K : g.C);
    const double cout = (double)(direction == TD_CONV_BWD_DATA ? g.C : g.K);
    const double rows = (double)g.N * (double)(direction == TD_CONV_BWD_DATA ? g.in_pixels() : g.out_pixels());
    const double block = direction == TD_CONV_BWD_WEIGHT ? cout : std::ceil(cout / k.tile_n) * k.tile_n;
    const double fmas = rows * cin * block;
    const double fma_s = fmas / ((double)std::max(1, ctx.workers) * 128.0 * 1.7e9 * 0.5);
    const double mem_s = 2.0 * rows * (cin + cout) / 3.0e12;
    const double ratio = fma_s / mem_s;
    const double fit = k.tile_n >= cout ? 0.0 : 0.002;
    const double tile = fit + 0.0001 * (k.tile_n == 32 ? 0.0 : 1.0) + 0.00005 * (k.tile_k == 256 ? 0.0 : 1.0);
    if (ratio <= 1.5 || fmas < 4194304.0) return -0.05 + 0.01 * std::min(ratio, 1.5) + tile;
    if (ratio <= 4.0) return 0.005 + 0.01 * ratio + tile;
    return 0.5 + tile;
}

}  // namespace td
